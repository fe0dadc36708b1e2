/** Loopback statsd receivers for the sink tests: they collect every line they get. */
import dgram from 'node:dgram';
import net from 'node:net';

export interface Receiver {
  readonly port: number;
  readonly lines: string[];
  /** Resolves once `pred(lines)` holds; rejects after `timeoutMs`. */
  waitFor(pred: (lines: string[]) => boolean, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

function waiter(lines: string[]): Receiver['waitFor'] {
  return (pred, timeoutMs = 3000) =>
    new Promise((resolve, reject) => {
      const start = Date.now();
      const tick = (): void => {
        if (pred(lines)) return resolve();
        if (Date.now() - start > timeoutMs) return reject(new Error(`timed out; got lines:\n${lines.join('\n')}`));
        setTimeout(tick, 10);
      };
      tick();
    });
}

export interface TcpReceiver extends Receiver {
  readonly connections: number;
  /** Drops every open connection (the server keeps listening). */
  dropConnections(): void;
}

export async function tcpReceiver(port = 0): Promise<TcpReceiver> {
  const lines: string[] = [];
  const sockets = new Set<net.Socket>();
  let connections = 0;
  const server = net.createServer((s) => {
    connections++;
    sockets.add(s);
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      buf += d;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    lines,
    get connections() {
      return connections;
    },
    waitFor: waiter(lines),
    dropConnections: () => {
      for (const s of sockets) s.destroy();
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface UdpReceiver extends Receiver {
  readonly packets: string[];
}

export async function udpReceiver(): Promise<UdpReceiver> {
  const lines: string[] = [];
  const packets: string[] = [];
  const sock = dgram.createSocket('udp4');
  sock.on('message', (msg) => {
    const text = msg.toString('utf8');
    packets.push(text);
    for (const l of text.split('\n')) if (l !== '') lines.push(l);
  });
  await new Promise<void>((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(0, '127.0.0.1', () => resolve());
  });
  return {
    port: sock.address().port,
    lines,
    packets,
    waitFor: waiter(lines),
    close: () => new Promise<void>((resolve) => sock.close(() => resolve())),
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
