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

async function serve(pool: WorkerQueries, stats = new StatsStore()): Promise<{ get: (p: string) => Promise<{ status: number; body: string; worker: string | null }>; close: () => void }> {
  const server = http.createServer(createDebugHandler(primaryDebugOptions(pool, stats, 2)));
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
      return { slot: 1, value: q.op === 'rlconfig' ? 'd.k: unit=MINUTE\n' : `explained ${JSON.stringify(q)}` };
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

test('the RLQS pages gather every worker\'s streams (they are spread over the workers); a worker that does not answer is named', async () => {
  const asked: Array<[WorkerQuery, number | undefined]> = [];
  const pool: WorkerQueries = {
    query: async (q, _timeout, slot) => {
      asked.push([q, slot]);
      if (slot === 2) throw new WorkerUnavailableError('worker 2 is restarting');
      return { slot: slot!, value: q.op === 'rlqs' ? 'stream a domain \'d\': 1 buckets\n' : `bucket of worker ${slot}\n` };
    },
    flushAll: async () => undefined,
  };
  const s = await serve(pool);
  try {
    const live = await s.get('/debug/rlqs');
    expect(live.status).toBe(200);
    expect(live.body).toBe("worker 1:\nstream a domain 'd': 1 buckets\nworker 2:\n  no answer (worker 2 is restarting)\n");
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
