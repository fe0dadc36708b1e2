/**
 * Pipelines of the Redis store: the commands of one or many requests (REDIS_PIPELINE_WINDOW /
 * REDIS_PIPELINE_LIMIT, or one event-loop turn) queued per instance, each batch sent with one
 * REDIS_TIMEOUT deadline and each reply given back to the request it belongs to.
 *
 * - Single / sentinel: one open batch, written as one RESP text (wire.ts).
 * - Cluster: one batch per master node, found through ioredis's slot map and written the same way
 *   to that node's connection. A key whose node has no ready connection goes in an ioredis cluster
 *   pipeline per hash slot instead, which routes it, waits for the connection and follows
 *   redirects; so does every key with REDIS_BATCH_SCRIPT, whose EVAL takes the keys of one slot.
 *   A node batch's command answered with MOVED, ASK, TRYAGAIN or CLUSTERDOWN (the slot map was
 *   stale, or the cluster is changing) is sent again through the ioredis cluster.
 */
import type { ChainableCommander, Redis } from 'ioredis';
import type { StoreError, CounterOp } from '../../core/store';
import type { Circuit } from '../circuit';
import { canWrite, errorText, type RedisClient, type RedisConnection } from './connection';
import { toStoreError } from './errors';
import { ALGORITHM_SCRIPT, ALGORITHM_SCRIPT_SHA, INCREMENT_SCRIPT, scriptArgs } from './scripts';
import { WirePipeline } from './wire';

// cluster-key-slot ships with ioredis and has no type declarations.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const calculateSlot = require('cluster-key-slot') as (key: string) => number;

/** Errors after which a node batch's command is sent again through the ioredis cluster. */
const REDIRECT = /^(?:MOVED|ASK|TRYAGAIN|CLUSTERDOWN)\b/;
/** The reply of each command of a node batch found not writable when its turn came (nothing sent). */
const NOT_SENT = new Error('not sent: the node connection is not ready');

export const PHASE_GET = 0;
export const PHASE_INCR = 1;

/** Told when all the batches of a request's phase have answered. */
export interface PhaseListener {
  phaseDone(req: Req): void;
}

/** One `increment` call in flight. */
export class Req {
  pending = 0;
  settled = false;
  phase = PHASE_INCR;
  readonly counts: number[];
  nowMs = 0;
  /** Counts before the request (GET phase of the stop-increment rule). */
  current: number[] | undefined;
  resolve!: (counts: number[]) => void;
  reject!: (err: StoreError) => void;

  constructor(
    readonly ops: readonly CounterOp[],
    readonly store: PhaseListener,
  ) {
    this.counts = new Array<number>(ops.length);
  }

  fail(err: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.reject(toStoreError(err));
  }

  /** One batch holding some of this request's commands has answered. */
  batchDone(): void {
    if (--this.pending === 0 && !this.settled) this.store.phaseDone(this);
  }
}

/** Commands queued for one pipeline, with whose they are. */
class Batch {
  /** The request of each entry. */
  readonly reqs: Req[] = [];
  /** Per entry: op index i ≥ 0 for INCRBY+EXPIRE, ~i for a GET. */
  readonly idx: number[] = [];
  /** Per entry: an EVALSHA of the algorithm script (op index in idx). */
  readonly scripted: boolean[] = [];
  /** REDIS_BATCH_SCRIPT: the INCRBY/EXPIRE pairs, sent as one EVAL after the other commands. */
  readonly keys: string[] = [];
  /** Per pair, in queue order: for REDIS_BATCH_SCRIPT's EVAL, or a node batch's resend after a redirect. */
  readonly addends: number[] = [];
  readonly ttls: number[] = [];
  commands = 0;
  lastReq: Req | undefined = undefined;
  settled = false;
  deadline: NodeJS.Timeout | undefined = undefined;
  flight: Flight | undefined = undefined;
  /** The circuit of the node the batch goes to (nodes.ts), told how it went. */
  circuit: Circuit | undefined = undefined;
  /** The single or sentinel connection it was written to. */
  sentTo: Redis | undefined = undefined;

  /**
   * The commands: as RESP text (src/backends/redis/wire.ts) for a single or sentinel connection or
   * a cluster `node`'s connection, or as an ioredis cluster pipeline for one `slot` (which routes
   * it and follows redirects).
   */
  constructor(
    readonly wire: WirePipeline | undefined,
    readonly pipeline: ChainableCommander | undefined,
    readonly node: Redis | undefined,
    readonly slot: number,
  ) {}
}

/** Cluster batches of one flush (per node or slot), at most `cap` in flight (REDIS_CLUSTER_PIPELINE_PARALLELISM). */
class Flight {
  constructor(
    readonly batches: Batch[],
    public next: number,
  ) {}
}

/** The queue of one instance (main or per-second): one open batch, or one per node or slot (cluster). */
export class Batcher {
  private open: Batch | undefined = undefined;
  private readonly byNode = new Map<Redis, Batch>();
  private readonly bySlot = new Map<number, Batch>();
  private dirty: Batch[] = [];
  private timer: NodeJS.Timeout | undefined = undefined;
  private immediate: NodeJS.Immediate | undefined = undefined;
  private readonly cluster: boolean;
  private readonly cap: number;
  /** A single or sentinel instance's one circuit. */
  private readonly instanceCircuit: Circuit | undefined;
  private readonly flushAllBound = (): void => this.flushAll();

  constructor(
    readonly conn: RedisConnection,
    private readonly windowMs: number,
    private readonly limit: number,
    parallelism: number,
    private readonly timeoutMs: number,
    private readonly batchScript: boolean,
  ) {
    this.cluster = conn.isCluster;
    this.cap = parallelism > 1 ? parallelism : 0;
    this.instanceCircuit = this.cluster ? undefined : conn.circuits?.of('');
  }

  /** Queues `INCRBY key addend` and `EXPIRE key ttl` for op `i` of `req`. */
  incr(req: Req, i: number, key: string, addend: number, ttl: number): void {
    const b = this.batchFor(key);
    if (this.batchScript) {
      b.keys.push(key);
      b.addends.push(addend);
      b.ttls.push(ttl);
    } else if (b.wire !== undefined) {
      b.wire.incrbyExpire(key, addend, ttl);
      if (b.node !== undefined) {
        b.addends.push(addend);
        b.ttls.push(ttl);
      }
    } else {
      b.pipeline!.incrby(key, addend).expire(key, ttl);
    }
    b.commands += 2;
    this.note(b, req, i);
  }

  /** Queues the algorithm script for op `i` of `req`. */
  script(req: Req, i: number, op: CounterOp): void {
    const b = this.batchFor(op.key);
    if (b.wire !== undefined) b.wire.command('evalsha', [ALGORITHM_SCRIPT_SHA, ...scriptArgs(op, req.nowMs)]);
    else b.pipeline!.evalsha(ALGORITHM_SCRIPT_SHA, ...scriptArgs(op, req.nowMs));
    b.commands += 1;
    this.note(b, req, i, true);
  }

  /** Queues `GET key` for op `i` of `req`. */
  get(req: Req, i: number, key: string): void {
    const b = this.batchFor(key);
    if (b.wire !== undefined) b.wire.command('get', [key]);
    else b.pipeline!.get(key);
    b.commands += 1;
    this.note(b, req, ~i);
  }

  /**
   * One request's commands are queued. They go when the limit fills, when the window ends, or —
   * with neither set — at the end of this event-loop turn, so the requests decided in one turn
   * share one pipeline (one write; still one round trip each; ~25% more throughput than a write
   * per request).
   */
  commit(): void {
    if (this.limit > 0) {
      if (this.cluster) {
        let full: Batch[] | undefined;
        for (const b of this.dirty) {
          if (b.commands >= this.limit) (full ??= []).push(b);
        }
        if (full !== undefined) {
          for (const b of full) {
            if (b.node !== undefined) this.byNode.delete(b.node);
            else this.bySlot.delete(b.slot);
          }
          this.dirty = this.dirty.filter((b) => b.commands < this.limit);
          this.launch(full);
        }
      } else if (this.open !== undefined && this.open.commands >= this.limit) {
        const b = this.open;
        this.open = undefined;
        this.dirty.length = 0;
        this.send(b);
      }
    }
    if (this.dirty.length === 0) return;
    if (this.windowMs > 0) {
      this.timer ??= setTimeout(this.flushAllBound, this.windowMs);
    } else {
      this.immediate ??= setImmediate(this.flushAllBound);
    }
  }

  /** Sends everything queued. */
  flushAll(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.immediate !== undefined) {
      clearImmediate(this.immediate);
      this.immediate = undefined;
    }
    if (this.cluster) {
      if (this.dirty.length === 0) return;
      const list = this.dirty;
      this.dirty = [];
      this.byNode.clear();
      this.bySlot.clear();
      this.launch(list);
    } else if (this.open !== undefined) {
      const b = this.open;
      this.open = undefined;
      this.dirty.length = 0;
      this.send(b);
    }
  }

  private batchFor(key: string): Batch {
    if (!this.cluster) {
      let b = this.open;
      if (b === undefined) {
        b = new Batch(new WirePipeline(), undefined, undefined, -1);
        b.circuit = this.instanceCircuit;
        this.open = b;
        this.dirty.push(b);
      }
      return b;
    }
    const slot = calculateSlot(key);
    const address = this.conn.masterAddress(slot);
    const node = this.batchScript || address === undefined ? undefined : this.conn.readyNode(address);
    if (node !== undefined) {
      let b = this.byNode.get(node);
      if (b === undefined) {
        b = new Batch(new WirePipeline(), undefined, node, slot);
        b.circuit = this.conn.circuits?.of(address!);
        this.byNode.set(node, b);
        this.dirty.push(b);
      }
      return b;
    }
    let b = this.bySlot.get(slot);
    if (b === undefined) {
      b = new Batch(undefined, this.conn.client().pipeline(), undefined, slot);
      if (address !== undefined) b.circuit = this.conn.circuits?.of(address);
      this.bySlot.set(slot, b);
      this.dirty.push(b);
    }
    return b;
  }

  /**
   * The circuit of the node `key` goes to, when it has one and it is open (nodes.ts): the store
   * looks only while some circuit is open.
   */
  openCircuitOf(key: string): Circuit | undefined {
    const circuits = this.conn.circuits;
    if (circuits === undefined) return undefined;
    let c = this.instanceCircuit;
    if (this.cluster) {
      const address = this.conn.masterAddress(calculateSlot(key));
      c = address === undefined ? undefined : circuits.get(address);
    }
    return c !== undefined && c.isOpen ? c : undefined;
  }

  /** `redis` (a single or sentinel instance) or `redis node host:port` (the cluster node of `key`), for errors. */
  circuitName(key: string): string {
    const circuits = this.conn.circuits!;
    return this.cluster ? circuits.name(this.conn.masterAddress(calculateSlot(key)) ?? '') : circuits.name('');
  }

  private note(b: Batch, req: Req, idx: number, scripted = false): void {
    b.reqs.push(req);
    b.idx.push(idx);
    b.scripted.push(scripted);
    if (b.lastReq !== req) {
      b.lastReq = req;
      req.pending++;
    }
  }

  private launch(list: Batch[]): void {
    if (this.cap === 0 || list.length <= this.cap) {
      for (const b of list) this.send(b);
      return;
    }
    const f = new Flight(list, this.cap);
    for (let k = 0; k < this.cap; k++) {
      list[k]!.flight = f;
      this.send(list[k]!);
    }
  }

  private send(b: Batch): void {
    const n = b.keys.length;
    // One REDIS_TIMEOUT deadline per pipeline (not one timer per command, as ioredis's
    // commandTimeout would arm); in cluster mode it also bounds ioredis's redirects and resends.
    // Armed first: a connection that cannot take commands answers before sendPipeline returns.
    b.deadline = setTimeout(() => this.fail(b, new Error('Command timed out')), this.timeoutMs);
    const wire = b.wire;
    if (wire !== undefined) {
      const node = b.node;
      if (n > 0) wire.command('eval', [INCREMENT_SCRIPT, n, ...b.keys, ...b.addends, ...b.ttls]);
      if (node === undefined) {
        const client = this.conn.client() as Redis;
        // No connection can take it: name the reason when it is known (refused credentials).
        const known = canWrite(client) ? undefined : this.conn.unavailable();
        if (known !== undefined) this.fail(b, known);
        else {
          b.sentTo = client;
          wire.send(client, (replies) => this.done(b, replies));
        }
      }
      else if (canWrite(node)) wire.send(node, (replies) => this.done(b, replies));
      // The node's connection was lost while the batch waited: nothing is written, each command
      // goes through the cluster instead.
      else this.done(b, new Array<unknown>(wire.commands).fill(NOT_SENT));
      return;
    }
    if (n > 0) b.pipeline!.eval(INCREMENT_SCRIPT, n, ...b.keys, ...b.addends, ...b.ttls);
    const known = this.conn.unavailable();
    if (known !== undefined) {
      this.fail(b, known);
      return;
    }
    b.pipeline!.exec().then(
      (res) => {
        if (res === null) this.fail(b, new Error('pipeline returned no replies'));
        else this.done(b, res.map(([err, value]) => err ?? value));
      },
      (err: unknown) => this.fail(b, err),
    );
  }

  /** `replies`: one per command in queue order, an Error where the command failed. */
  private done(b: Batch, replies: unknown[]): void {
    if (b.settled) return;
    this.settle(b);
    const circuit = b.circuit;
    if (circuit !== undefined) {
      // A lost or unwritable connection fails every command alike: the first reply tells. While
      // a sentinel pool moves to a new master, the old connections' failures are expected.
      const first = replies[0];
      if (first === NOT_SENT || (first instanceof Error && this.conn.switching)) circuit.answeredWithError();
      else if (first instanceof Error && first.name !== 'ReplyError') circuit.failed(first.message);
      else circuit.succeeded();
    }
    // A sentinel failover under way: increments the old master acknowledged may be lost.
    if (b.sentTo !== undefined && this.conn.suspecting) this.conn.acknowledged(b.sentTo, acknowledgedIncrements(b, replies));
    const reqs = b.reqs;
    const idx = b.idx;
    // REDIS_BATCH_SCRIPT: the EVAL's reply (last) holds the INCRBY counts in queue order.
    let batchCounts: unknown[] | undefined;
    let countError: Error | null = null;
    let next = 0;
    if (b.keys.length > 0) {
      const r = replies[replies.length - 1];
      if (r instanceof Error) countError = r;
      else if (!Array.isArray(r) || r.length !== b.keys.length) countError = new Error('the increment script answered an unexpected reply');
      else batchCounts = r as unknown[];
    }
    let pos = 0;
    let last: Req | undefined;
    // Redis full (noeviction): an OOM answer says so, an INCRBY answered while it is says it has room again.
    let oom: Error | undefined;
    let counted = false;
    for (let k = 0; k < reqs.length; k++) {
      const req = reqs[k]!;
      const i = idx[k]!;
      if (req !== last) {
        last?.batchDone();
        last = req;
      }
      if (b.scripted[k] === true) {
        const r = replies[pos++];
        if (!(r instanceof Error)) req.counts[i] = Number(r);
        else if (r.message.startsWith('NOSCRIPT') || this.redirected(b, r)) this.evalFallback(req, i);
        else {
          if (r.message.startsWith('OOM ')) oom = r;
          req.fail(r);
        }
      } else if (i >= 0 && this.batchScript) {
        const c = batchCounts?.[next++];
        if (countError !== null) {
          if (countError.message.startsWith('OOM ')) oom = countError;
          req.fail(countError);
        } else if (c instanceof Error) req.fail(c);
        else {
          req.counts[i] = c as number;
          counted = true;
        }
      } else if (i >= 0) {
        const incr = replies[pos];
        const expire = replies[pos + 1];
        const pair = next++;
        pos += 2;
        if (incr instanceof Error) {
          if (this.redirected(b, incr)) this.resendPair(req, i, b.addends[pair]!, b.ttls[pair]!);
          else {
            if (incr.message.startsWith('OOM ')) oom = incr;
            req.fail(incr);
          }
        } else if (expire instanceof Error) {
          // Counted; only the EXPIRE missed its key (moved away in between).
          if (this.redirected(b, expire)) {
            req.counts[i] = incr as number;
            this.resendExpire(req, i, b.ttls[pair]!);
          } else {
            req.fail(expire);
          }
        } else {
          req.counts[i] = incr as number;
          counted = true;
        }
      } else {
        const r = replies[pos++];
        if (!(r instanceof Error)) req.current![~i] = toCount(r);
        else if (this.redirected(b, r)) this.resendGet(req, ~i);
        else req.fail(r);
      }
    }
    last?.batchDone();
    if (oom !== undefined) this.conn.memoryAnswer(true, oom.message);
    else if (counted && this.conn.outOfMemory) this.conn.memoryAnswer(false);
  }

  /**
   * Whether a node batch's command goes through the cluster instead: it was not sent, or it was
   * redirected. After MOVED ioredis's slot map is stale: have it reloaded. (ASK and TRYAGAIN come
   * during a migration, when the map is still right; on CLUSTERDOWN ioredis reloads it itself.)
   */
  private redirected(b: Batch, err: Error): boolean {
    if (b.node === undefined) return false;
    if (err === NOT_SENT) return true;
    if (!REDIRECT.test(err.message)) return false;
    if (err.message.startsWith('MOVED')) this.conn.refreshSlots();
    return true;
  }

  /** The script was not cached on that server, or the command was redirected: EVAL (caches it). */
  private evalFallback(req: Req, i: number): void {
    const args = scriptArgs(req.ops[i]!, req.nowMs);
    this.resend(
      req,
      (c) => c.eval(ALGORITHM_SCRIPT, ...args),
      (v) => {
        req.counts[i] = Number(v);
      },
    );
  }

  private resendPair(req: Req, i: number, addend: number, ttl: number): void {
    const key = req.ops[i]!.key;
    this.resend(
      req,
      (c) => c.pipeline().incrby(key, addend).expire(key, ttl).exec(),
      (res) => {
        req.counts[i] = pairCount(res);
      },
    );
  }

  private resendExpire(req: Req, i: number, ttl: number): void {
    const key = req.ops[i]!.key;
    this.resend(
      req,
      (c) => c.expire(key, ttl),
      () => undefined,
    );
  }

  private resendGet(req: Req, i: number): void {
    const key = req.ops[i]!.key;
    this.resend(
      req,
      (c) => c.get(key),
      (v) => {
        req.current![i] = toCount(v);
      },
    );
  }

  /**
   * Sends one op of `req` again through the ioredis client (a cluster follows redirects and
   * retries) within a REDIS_TIMEOUT deadline of its own; `take` stores the reply, or throws.
   */
  private resend(req: Req, send: (client: RedisClient) => Promise<unknown>, take: (reply: unknown) => void): void {
    if (req.settled) return;
    req.pending++;
    let settled = false;
    const deadline = setTimeout(() => {
      if (settled) return;
      settled = true;
      req.fail(new Error('Command timed out'));
    }, this.timeoutMs);
    send(this.conn.client()).then(
      (reply) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        try {
          take(reply);
        } catch (err) {
          req.fail(err);
          return;
        }
        req.batchDone();
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        req.fail(err);
      },
    );
  }

  private fail(b: Batch, err: unknown): void {
    if (b.settled) return;
    this.settle(b);
    if (b.circuit !== undefined) {
      if (toStoreError(err).transient && !this.conn.switching) b.circuit.failed(errorText(err));
      else b.circuit.answeredWithError();
    }
    const reqs = b.reqs;
    for (let k = 0; k < reqs.length; k++) reqs[k]!.fail(err);
  }

  private settle(b: Batch): void {
    b.settled = true;
    if (b.deadline !== undefined) clearTimeout(b.deadline);
    const f = b.flight;
    if (f !== undefined && f.next < f.batches.length) {
      const nb = f.batches[f.next++]!;
      nb.flight = f;
      this.send(nb);
    }
  }
}

/** How many of a batch's increments (INCRBY, the batch script's, an algorithm's script) were answered. */
function acknowledgedIncrements(b: Batch, replies: unknown[]): number {
  let n = 0;
  let pos = 0;
  for (let k = 0; k < b.idx.length; k++) {
    if (b.idx[k]! < 0) {
      pos++; // a GET
    } else if (b.scripted[k] === true) {
      if (!(replies[pos++] instanceof Error)) n++;
    } else if (b.keys.length > 0) {
      n++; // in the batch script, answered with it
    } else {
      if (!(replies[pos] instanceof Error)) n++;
      pos += 2;
    }
  }
  if (b.keys.length > 0 && replies[replies.length - 1] instanceof Error) n -= b.keys.length;
  return n;
}

/** The INCRBY reply of an ioredis pipeline `INCRBY`, `EXPIRE`; throws the error of either. */
function pairCount(res: unknown): number {
  const r = res as Array<[Error | null, unknown]> | null;
  if (r === null) throw new Error('pipeline returned no replies');
  const err = r[0]![0] ?? r[1]![0];
  if (err !== null) throw err;
  return r[0]![1] as number;
}

function toCount(v: unknown): number {
  if (v === null || v === undefined) return 0;
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}
