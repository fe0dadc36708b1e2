/**
 * The memcached nodes of the store and whether they answer: the node list (from
 * MEMCACHE_HOST_PORT, or MEMCACHE_SRV re-resolved every MEMCACHE_SRV_REFRESH) and a light probe
 * of every node (a `get` of a constant key, every healthCheckIntervalMs). Healthy while at least
 * one node answers.
 */
import type { Logger } from '../../telemetry/logger';
import { pickNode } from './keys';
import { MemcacheNode } from './node';
import type { SrvResolver } from './servers';
import { errorMessage } from '../../platform/errors';

export interface MemcacheNodeState {
  /** `host:port` */
  readonly node: string;
  /** Answered last time it was asked; undefined before the first answer or failure. */
  readonly up: boolean | undefined;
  /** The last connection error, '' if none. */
  readonly lastError: string;
  /** Commands waiting for its answer. */
  readonly inFlight: number;
  /** When `up` last changed (ms since the epoch). */
  readonly sinceMs: number;
}

export type HealthListener = (healthy: boolean, reason: string) => void;

export interface MemcachePoolOptions {
  /** MEMCACHE_TIMEOUT, per command. */
  readonly timeoutMs: number;
  /** Commands that may wait on one node's connection at once. */
  readonly maxInFlightPerNode: number;
  /** 0 = no probe: only traffic updates health, and no node is skipped. */
  readonly healthCheckIntervalMs: number;
  readonly logger: Logger;
  /** MEMCACHE_SRV and its refresh period (0 = never re-resolved). */
  readonly srv?: { readonly name: string; readonly resolver: SrvResolver; readonly refreshMs: number } | undefined;
}

/** One liveness probe of a node; `probing` marks it in flight so probes do not pile up. */
function probe(node: MemcacheNode, done?: () => void): void {
  node.probing = true;
  node.probe(() => {
    node.probing = false;
    done?.();
  });
}

export class MemcachePool {
  private current: MemcacheNode[] = [];
  private healthy = false;
  private readonly listeners = new Set<HealthListener>();
  /** The periodic health probe runs (so a node marked down is skipped until it answers one). */
  private readonly probing: boolean;
  private closed = false;
  private healthTimer: NodeJS.Timeout | undefined;
  private srvTimer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;

  constructor(private readonly opts: MemcachePoolOptions) {
    this.probing = opts.healthCheckIntervalMs > 0;
  }

  /** The nodes, in placement order (crc32(key) % n). */
  get nodes(): readonly MemcacheNode[] {
    return this.current;
  }

  isHealthy(): boolean {
    return this.healthy;
  }

  /** Calls `listener(healthy, reason)` on every change of isHealthy(); returns the unsubscriber. */
  onHealthChange(listener: HealthListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Every node and whether it answers, in distribution order. */
  nodeStates(): MemcacheNodeState[] {
    return this.current.map((n) => ({ node: n.name, up: n.up, lastError: n.lastError, inFlight: n.inFlight, sinceMs: n.changedAtMs }));
  }

  /** The node names (`host:port`), in placement order. */
  servers(): string[] {
    return this.current.map((n) => n.name);
  }

  /** The node that holds `key` with the current node list. */
  serverFor(key: string): string | undefined {
    const n = this.current.length;
    if (n === 0) return undefined;
    return this.current[pickNode(key, this.current.length)]!.name;
  }

  /**
   * Probes every node now and resolves when all answered or failed (each probe is bounded by the
   * node's deadline; the timer here only guards against a late timer on a loaded machine).
   */
  checkNow(): Promise<void> {
    const nodes = this.current.filter((n) => !n.probing);
    if (nodes.length === 0) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let left = nodes.length;
      const timer = setTimeout(resolve, 2 * this.opts.timeoutMs + 100);
      timer.unref();
      for (const node of nodes) {
        probe(node, () => {
          if (--left === 0) {
            clearTimeout(timer);
            resolve();
          }
        });
      }
    });
  }

  /** Re-resolves MEMCACHE_SRV now (what the refresh timer does); keeps the old list on failure. */
  refreshServers(): Promise<void> {
    const srv = this.opts.srv;
    if (srv === undefined || this.closed) return Promise.resolve();
    this.refreshing ??= (async () => {
      try {
        const names = await srv.resolver.resolve(srv.name);
        if (!this.closed) this.setNodes(names);
      } catch (err) {
        if (!this.closed) {
          this.opts.logger.warn(
            `MEMCACHE_SRV=${srv.name}: lookup failed, keeping the ${this.current.length} known servers: ${errorMessage(err)}`,
          );
        }
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /**
   * A node known to be down is not asked while the probe runs (its keys fail at once) until a
   * probe gets an answer.
   */
  skips(node: MemcacheNode): boolean {
    return node.up === false && this.probing;
  }

  setNodes(names: readonly string[]): void {
    const current = this.current;
    if (current.length === names.length && current.every((n, i) => n.name === names[i])) return;
    const byName = new Map(current.map((n) => [n.name, n]));
    const fresh: MemcacheNode[] = [];
    const next = names.map((name) => {
      const known = byName.get(name);
      if (known !== undefined) return known;
      const node = new MemcacheNode(
        name,
        { timeoutMs: this.opts.timeoutMs, maxInFlight: this.opts.maxInFlightPerNode, logger: this.opts.logger },
        this.nodeState,
      );
      fresh.push(node);
      return node;
    });
    const keep = new Set(names);
    for (const n of current) if (!keep.has(n.name)) n.close();
    this.current = next;
    this.opts.logger.info(`memcache store: servers ${names.length > 0 ? names.join(', ') : '(none)'}`);
    this.updateHealth(current.length === 0 ? 'servers set' : 'servers changed');
    if (current.length > 0 && fresh.length > 0) {
      for (const node of fresh) probe(node);
    }
  }

  private readonly nodeState = (node: MemcacheNode, up: boolean, err: Error | undefined): void => {
    if (this.closed || node.isClosed) return;
    if (node.up === up) return;
    node.up = up;
    node.changedAtMs = Date.now();
    if (up) this.opts.logger.info(`memcached ${node.name} answers`);
    else this.opts.logger.warn(`memcached ${node.name} does not answer: ${err?.message ?? 'unknown error'}`);
    this.updateHealth(up ? `${node.name} answers` : `${node.name} does not answer: ${err?.message ?? ''}`);
  };

  private updateHealth(reason: string): void {
    let h = false;
    for (const n of this.current) {
      if (n.up === true) {
        h = true;
        break;
      }
    }
    if (h === this.healthy) return;
    this.healthy = h;
    for (const l of this.listeners) {
      try {
        l(h, reason);
      } catch (err) {
        this.opts.logger.error(`memcache store: health listener failed: ${errorMessage(err)}`);
      }
    }
  }

  start(): void {
    const every = this.opts.healthCheckIntervalMs;
    if (every > 0) {
      this.healthTimer = setInterval(() => {
        for (const node of this.current) if (!node.probing) probe(node);
      }, every);
      this.healthTimer.unref();
    }
    const refresh = this.opts.srv?.refreshMs ?? 0;
    if (this.opts.srv !== undefined && refresh > 0) {
      this.srvTimer = setInterval(() => void this.refreshServers(), refresh);
      this.srvTimer.unref();
    }
  }

  /** Stops probing and re-resolving; the nodes still serve commands in flight. */
  stop(): void {
    this.closed = true;
    clearInterval(this.healthTimer);
    clearInterval(this.srvTimer);
    this.opts.srv?.resolver.cancel();
  }

  /** Closes every node (after stop()). */
  close(): void {
    this.stop();
    for (const node of this.current) node.close();
    this.listeners.clear();
    this.healthy = false;
  }
}
