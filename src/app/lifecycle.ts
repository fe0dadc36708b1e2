/** Starting and stopping listeners, shared by the single process, the workers and the primary (signals and exit codes are the entry point's). */
import type http from 'node:http';
import type { AddressInfo, Server as NetServer } from 'node:net';
import { LISTEN_BACKLOG } from '../server/admission';

/** A start-up problem that is the operator's to fix (printed as one line, exit 1). */
export class StartupError extends Error {}

/**
 * Whether `work` settles within `ms` (its rejection counts as settled; the caller logs nothing of
 * it). The timer is cleared either way, so nothing is left holding the event loop.
 */
export async function settleWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const done = await Promise.race([
    work.then(
      () => true,
      () => true,
    ),
    new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), ms))),
  ]);
  clearTimeout(timer);
  return done;
}

export function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Listens; resolves to `host:port` as bound, rejects with a StartupError naming the listener. */
export function listen(server: NetServer, host: string, port: number, what: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(new StartupError(`cannot listen for ${what} on ${hostPort(host, port)}: ${err.message}`));
    server.once('error', onError);
    server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => {
      server.off('error', onError);
      resolve(hostPort(host, (server.address() as AddressInfo).port));
    });
  });
}

export function closeHttp(server: http.Server | undefined): Promise<void> {
  if (server === undefined || !server.listening) return Promise.resolve();
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
