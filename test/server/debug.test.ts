/**
 * The debug port's /rlconfig and /debug/rlqs send a big listing piece by piece, as the client
 * takes it, each piece made in a turn of the event loop of its own: the listing is never one
 * string, the loop is not held by it, and a client that leaves stops it and closes the listing.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createDebugHandler } from '../../src/server/debug';
import { StatsStore } from '../../src/stats/store';
import { quietFor, waitFor } from '../support/wait';

const PIECE = 'x'.repeat(64 * 1024 - 1) + '\n';
const PIECES = 2_000; // 128 MiB if it were one string

async function serve(dumpConfig: () => Iterable<string>, quotaBuckets?: () => Iterable<string>) {
  const server = http.createServer(createDebugHandler({ stats: new StatsStore(), dumpConfig, ...(quotaBuckets ? { quotaBuckets } : {}) }));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

test('/rlconfig takes the next piece only when the socket has room; a client that leaves ends it', async () => {
  let taken = 0;
  let finished = false;
  function* pieces(): Generator<string> {
    try {
      for (; taken < PIECES; taken++) yield PIECE;
    } finally {
      finished = true;
    }
  }
  const { server, port } = await serve(() => pieces());
  try {
    const res = await new Promise<http.IncomingMessage>((resolve) => http.get({ port, host: '127.0.0.1', path: '/rlconfig' }, resolve));
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/plain; charset=utf-8');
    // Read one chunk, then stop reading: the server must stop taking pieces soon after.
    await new Promise((resolve) => res.once('data', resolve));
    res.pause();
    await waitFor(() => taken > 0, 'a piece taken');
    const before = taken;
    await quietFor(200); // no event to wait for: that more pieces are NOT taken
    expect(taken).toBeLessThan(PIECES / 4);
    expect(taken - before).toBeLessThan(PIECES / 4);
    // The client leaves: the generator is closed (its finally runs) without being run to its end.
    res.destroy();
    await waitFor(() => finished, 'the listing closed');
    expect(taken).toBeLessThan(PIECES / 4);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('/rlconfig sends every piece, in order, when the client reads it all', async () => {
  const { server, port } = await serve(() => ['a: 1\n', 'b: 2\n', 'c: 3\n']);
  try {
    const res = await fetch(`http://127.0.0.1:${port}/rlconfig`);
    expect(res.headers.get('transfer-encoding')).toBe('chunked');
    expect(await res.text()).toBe('a: 1\nb: 2\nc: 3\n');
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
});

test('/debug/rlqs: each piece is made in a turn of the event loop of its own, even for a client that reads as fast as it is sent', async () => {
  // A timer that ticks between turns: a piece made in the same turn as the one before sees the same tick.
  let ticks = 0;
  let ticking = true;
  const tick = (): void => {
    ticks++;
    if (ticking) setImmediate(tick);
  };
  setImmediate(tick);
  const seen: number[] = [];
  function* pieces(): Generator<string> {
    for (let i = 0; i < 200; i++) {
      seen.push(ticks);
      yield `line ${i}\n`; // small pieces: the socket never pushes back, so only the listing itself yields
    }
  }
  const { server, port } = await serve(() => [], () => pieces());
  try {
    const res = await fetch(`http://127.0.0.1:${port}/debug/rlqs`);
    expect(res.headers.get('transfer-encoding')).toBe('chunked');
    const text = await res.text();
    expect(text.split('\n')).toHaveLength(201);
    const sameTurn = seen.slice(1).filter((t, i) => t === seen[i]).length;
    expect(sameTurn).toBe(0);
  } finally {
    ticking = false;
    await new Promise((resolve) => server.close(resolve));
  }
});
