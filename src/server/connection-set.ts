/**
 * The connections one of our socket servers serves (the gRPC port's HTTP/2, the HTTP port's
 * HTTP/1.1), for the server's drain and forced close: one way of doing both for both ports.
 */
import type net from 'node:net';

export class ConnectionSet<C extends { destroy(): void }> implements Iterable<C> {
  private readonly open = new Set<C>();
  private draining = false;

  /** `end` ends a connection gracefully: its calls in flight finish, then it closes. */
  constructor(private readonly end: (connection: C) => void) {}

  /** Serves `socket` with the connection `make` returns, until the socket closes; refused during a drain. */
  admit(socket: net.Socket, make: () => C): C | undefined {
    if (this.draining) {
      socket.destroy();
      return undefined;
    }
    const connection = make();
    this.open.add(connection);
    socket.once('close', () => this.open.delete(connection));
    return connection;
  }

  /** Stops `server` listening and ends every connection; resolves once all have closed. */
  drain(server: net.Server): Promise<void> {
    this.draining = true;
    return new Promise<void>((resolve) => {
      if (!server.listening) resolve();
      else server.close(() => resolve());
      for (const c of this.open) this.end(c);
    });
  }

  /** Closes every connection at once (the drain took too long). */
  forceClose(): void {
    for (const c of this.open) c.destroy();
  }

  [Symbol.iterator](): Iterator<C> {
    return this.open[Symbol.iterator]();
  }
}
