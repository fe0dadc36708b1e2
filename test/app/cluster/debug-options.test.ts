/**
 * The primary's debug page (worker mode) over a real HTTP listener, with the workers faked:
 * forwarded answers, the 503 when no worker answers, fresh stats before /stats, ?worker=N.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { primaryDebugOptions, type WorkerQueries } from '../../../src/app/cluster/debug-options';
import type { WorkerQuery } from '../../../src/app/cluster/messages';
import { WorkerUnavailableError } from '../../../src/app/cluster/pool';
import { createDebugHandler } from '../../../src/server/debug';
import { StatsStore } from '../../../src/stats/store';
import type { LimitsViewSettings } from '../../../src/settings/settings';
import { quietFor, waitFor } from '../../support/wait';

async function serve(pool: WorkerQueries, stats = new StatsStore(), view?: LimitsViewSettings): Promise<{ get: (p: string) => Promise<{ status: number; body: string; worker: string | null }>; close: () => void }> {
  const server = http.createServer(createDebugHandler(primaryDebugOptions(pool, stats, 2, view)));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    get: async (p) => {
      const res = await fetch(`http://127.0.0.1:${port}${p}`);
      return { status: res.status, body: await res.text(), worker: res.headers.get('x-ratelimit-worker') };
    },
    close: () => server.close(),
  };
}

test('/rlconfig and /debug/explain are answered by a worker', async () => {
  const asked: Array<[WorkerQuery, number | undefined]> = [];
  const pool: WorkerQueries = {
    query: async (q, _timeout, slot) => {
      asked.push([q, slot]);
      if (q.op === 'rlconfig' || q.op === 'rlconfig-next') return { slot: 1, value: q.op === 'rlconfig' ? 'd.k: unit=MINUTE\n' : '' };
      return { slot: 1, value: `explained ${JSON.stringify(q)}` };
    },
    flushAll: async () => undefined,
  };
  const s = await serve(pool);
  try {
    expect(await s.get('/rlconfig')).toEqual({ status: 200, body: 'd.k: unit=MINUTE\n', worker: null });
    const e = await s.get('/debug/explain?domain=d&descriptors=k=v');
    expect(e.body).toBe('explained {"op":"explain","domain":"d","descriptors":["k=v"]}');
    const p = await s.get('/debug/pprof/profile?seconds=0.5&worker=2');
    expect(p.status).toBe(200);
    expect(p.worker).toBe('1'); // the answering slot, as the fake says
    expect(asked.at(-1)).toEqual([{ op: 'profile', ms: 500 }, 2]);
  } finally {
    s.close();
  }
});

test('no worker to answer: 503 with the reason; a worker\'s own error: 500', async () => {
  const s = await serve({
    query: async (q) => {
      if (q.op === 'rlconfig') throw new WorkerUnavailableError('no worker is listening at the moment (worker mode); try again shortly');
      throw new Error('boom');
    },
    flushAll: async () => undefined,
  });
  try {
    expect(await s.get('/rlconfig')).toEqual({
      status: 503,
      body: 'no worker is listening at the moment (worker mode); try again shortly\n',
      worker: null,
    });
    expect(await s.get('/debug/explain?domain=d&descriptors=k=v')).toMatchObject({ status: 500, body: 'explain failed: Error: boom\n' });
    expect(await s.get('/debug/pprof/profile?seconds=1&worker=0')).toMatchObject({ status: 400, body: 'worker must be a number from 1 to 2\n' });
  } finally {
    s.close();
  }
});

test('/stats waits for the workers\' fresh flush', async () => {
  const stats = new StatsStore();
  const s = await serve(
    {
      query: async () => ({ slot: 1, value: '' }),
      flushAll: async () => {
        await new Promise((r) => setTimeout(r, 20));
        stats.counter('ratelimit.service.rate_limit.d.k.total_hits').inc(3);
      },
    },
    stats,
  );
  try {
    expect((await s.get('/stats')).body).toBe('ratelimit.service.rate_limit.d.k.total_hits: 3\n');
  } finally {
    s.close();
  }
});

test('the RLQS pages gather every worker\'s streams (they are spread over the workers), /debug/rlqs pulled piece by piece from each; a worker that does not answer is named', async () => {
  const asked: Array<[WorkerQuery, number | undefined]> = [];
  const pieces = new Map<number, string[]>();
  const pool: WorkerQueries = {
    query: async (q, _timeout, slot) => {
      asked.push([q, slot]);
      if (slot === 2) throw new WorkerUnavailableError('worker 2 is restarting');
      if (q.op === 'rlqs') pieces.set(q.listing, ["stream a domain 'd': 1 buckets\n", '  [["api","x"]]: demand 1.00/s\n']);
      if (q.op === 'rlqs' || q.op === 'rlconfig-next') return { slot: slot!, value: pieces.get(q.listing)!.shift() ?? '' };
      return { slot: slot!, value: `bucket of worker ${slot}\n` };
    },
    flushAll: async () => undefined,
  };
  const s = await serve(pool);
  try {
    const live = await s.get('/debug/rlqs');
    expect(live.status).toBe(200);
    expect(live.body).toBe('worker 1:\nstream a domain \'d\': 1 buckets\n  [["api","x"]]: demand 1.00/s\nworker 2:\n  no answer (worker 2 is restarting)\n');
    const listing = (asked[0]![0] as { listing: number }).listing;
    expect(asked.slice(0, 3)).toEqual([
      [{ op: 'rlqs', listing }, 1],
      [{ op: 'rlconfig-next', listing }, 1],
      [{ op: 'rlconfig-next', listing }, 1],
    ]);
    const why = await s.get('/debug/explain?domain=d&bucket=api=search');
    expect(why.body).toBe('worker 1:\nbucket of worker 1\nworker 2:\n  no answer (worker 2 is restarting)\n');
    expect(asked.filter(([q]) => q.op === 'explain-bucket').map(([q, slot]) => [q, slot])).toEqual([
      [{ op: 'explain-bucket', domain: 'd', bucket: 'api=search' }, 1],
      [{ op: 'explain-bucket', domain: 'd', bucket: 'api=search' }, 2],
    ]);
  } finally {
    s.close();
  }
});

describe('/rlconfig is pulled from one worker a piece at a time', () => {
  const PIECE = 'x'.repeat(64 * 1024 - 1) + '\n';

  /** A worker with a listing of `pieces` pieces, answering as slot 2 (the first listening one). */
  function listingWorker(pieces: number) {
    const asked: Array<[WorkerQuery, number | undefined]> = [];
    const sent = new Map<number, number>();
    const pool: WorkerQueries = {
      query: async (q, _timeout, slot) => {
        asked.push([q, slot]);
        if (q.op === 'rlconfig') sent.set(q.listing, 0);
        if (q.op === 'rlconfig-end') sent.delete(q.listing);
        if (q.op !== 'rlconfig' && q.op !== 'rlconfig-next') return { slot: 2, value: '' };
        const n = sent.get(q.listing);
        if (n === undefined) throw new Error(`listing ${q.listing} is not open`);
        sent.set(q.listing, n + 1);
        return { slot: 2, value: n < pieces ? PIECE : '' };
      },
      flushAll: async () => undefined,
    };
    return { pool, asked, sent };
  }

  test('every piece in order, all from the worker that started the listing', async () => {
    const { pool, asked, sent } = listingWorker(40);
    const s = await serve(pool);
    try {
      const res = await s.get('/rlconfig');
      expect(res.status).toBe(200);
      expect(res.body).toBe(PIECE.repeat(40));
      expect(asked[0]).toEqual([{ op: 'rlconfig', listing: 1 }, undefined]);
      expect(asked.slice(1).every(([q, slot]) => q.op === 'rlconfig-next' && q.listing === 1 && slot === 2)).toBe(true);
      expect(asked).toHaveLength(41);
      expect(sent.get(1)).toBe(41); // the worker said '' once: the end
    } finally {
      s.close();
    }
  });

  test('a client that stops reading stops the pulls; one that leaves ends the listing in the worker', async () => {
    const { pool, asked, sent } = listingWorker(2_000); // 128 MiB
    const server = http.createServer(createDebugHandler(primaryDebugOptions(pool, new StatsStore(), 2)));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const res = await new Promise<http.IncomingMessage>((resolve) =>
        http.get({ port: (server.address() as AddressInfo).port, host: '127.0.0.1', path: '/rlconfig' }, resolve),
      );
      await new Promise((resolve) => res.once('data', resolve));
      res.pause();
      await waitFor(() => asked.length > 1, 'a piece pulled');
      // Paused: the socket's buffers fill and the pulls stop far before the end (2,000 pieces).
      await quietFor(200);
      expect(asked.length).toBeLessThan(500);
      res.destroy();
      await waitFor(() => asked.some(([q]) => q.op === 'rlconfig-end'), 'the listing ended in the worker');
      expect(asked.at(-1)).toEqual([{ op: 'rlconfig-end', listing: 1 }, 2]);
      expect(sent.size).toBe(0);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('/debug/denials merges the workers\' rings', () => {
  const VIEW: LimitsViewSettings = { debugValues: 'plain', denialsSize: 100, denialsLogPerSecond: 0, configHistorySize: 0 };
  const T0 = Date.parse('2026-12-02T06:00:00Z');
  /** Worker 1 denied at 0, 20 and 40 ms (its seq 1..3), worker 2 at 10 and 30 ms (seq 1..2). */
  const RINGS = new Map<number, number[]>([
    [1, [0, 20, 40]],
    [2, [10, 30]],
  ]);

  /** A worker's page as its ring answers it: newest first, older than `before`, `limit` at most. */
  function ringPage(worker: number, query: URLSearchParams): string {
    const times = RINGS.get(worker)!;
    const limit = Number(query.get('limit') ?? 100);
    const before = query.has('before') ? Number(query.get('before')) : times.length + 1;
    const denials = [];
    for (let seq = Math.min(times.length, before - 1); seq >= 1 && denials.length < limit; seq--) {
      denials.push({ seq, time: new Date(T0 + times[seq - 1]!).toISOString(), domain: 'd', rule: 'd.user' });
    }
    const last = denials.at(-1)?.seq ?? 0;
    const next = denials.length === limit && last > 1 ? `,"next_before":${last}` : '';
    return `{"size":100,"recorded":${times.length},"kept":${times.length},"denials":${JSON.stringify(denials)}${next}}\n`;
  }

  const pool = (down = new Set<number>()): WorkerQueries & { asked: Array<[string, number | undefined]> } => {
    const asked: Array<[string, number | undefined]> = [];
    return {
      asked,
      query: async (q, _timeout, slot) => {
        if (q.op !== 'denials') throw new Error(`unexpected ${q.op}`);
        asked.push([q.query, slot]);
        if (down.has(slot!)) throw new WorkerUnavailableError(`worker ${slot} is restarting`);
        return { slot: slot!, value: ringPage(slot!, new URLSearchParams(q.query)) };
      },
      flushAll: async () => undefined,
    };
  };

  type Page = { workers: unknown; recorded: number; denials: Array<{ worker: number; seq: number }>; next_before?: string };

  test('newest first over both, paged with a cursor of each worker\'s place, to the end', async () => {
    const p = pool();
    const s = await serve(p, new StatsStore(), VIEW);
    try {
      const seen: Array<[number, number]> = [];
      let query = '?limit=2&domain=d';
      const cursors: Array<string | undefined> = [];
      for (let i = 0; i < 3; i++) {
        const res = await s.get(`/debug/denials${query}`);
        expect(res.status).toBe(200);
        const page = JSON.parse(res.body) as Page;
        expect(page.recorded).toBe(5);
        seen.push(...page.denials.map((d): [number, number] => [d.worker, d.seq]));
        cursors.push(page.next_before);
        query = `?limit=2&domain=d&before=${page.next_before}`;
      }
      expect(seen).toEqual([[1, 3], [2, 2], [1, 2], [2, 1], [1, 1]]);
      // After page 2 worker 2 is done: the cursor leaves it out, and it is asked only for its figures.
      expect(cursors).toEqual(['1:3,2:2', '1:2', undefined]);
      expect(p.asked.slice(-2)).toEqual([
        ['limit=2&domain=d&before=2', 1],
        ['limit=2&domain=d&before=1', 2],
      ]);
    } finally {
      s.close();
    }
  });

  test('a worker that does not answer is named and the others\' denials are served; none answering is a 503; a bad cursor a 400', async () => {
    const s = await serve(pool(new Set([2])), new StatsStore(), VIEW);
    try {
      const page = JSON.parse((await s.get('/debug/denials')).body) as Page;
      expect(page.workers).toEqual({ merged: [1], unanswered: [{ worker: 2, error: 'worker 2 is restarting' }] });
      expect(page.denials.map((d) => [d.worker, d.seq])).toEqual([[1, 3], [1, 2], [1, 1]]);
      // A worker that misses a page keeps its place in the cursor.
      const later = JSON.parse((await s.get('/debug/denials?limit=1&before=1:3,2:2')).body) as Page;
      expect(later.denials.map((d) => [d.worker, d.seq])).toEqual([[1, 2]]);
      expect(later.next_before).toBe('1:2,2:2');
      expect((await s.get('/debug/denials?before=1:3&before=1:2')).status).toBe(400);
    } finally {
      s.close();
    }
    const none = await serve(pool(new Set([1, 2])), new StatsStore(), VIEW);
    try {
      expect(await none.get('/debug/denials')).toMatchObject({ status: 503, body: 'no worker answered: worker 1: worker 1 is restarting; worker 2: worker 2 is restarting\n' });
      for (const before of ['5', '1:0', '3:4', '1:2,1:3', '1:2,']) {
        expect(await none.get(`/debug/denials?before=${before}`)).toMatchObject({ status: 400, body: expect.stringMatching(/^before must be a merged page's next_before in worker mode: worker:seq pairs joined by ',' \(workers 1 to 2\)/) });
      }
    } finally {
      none.close();
    }
  });
});
