/**
 * How many new counters one caller (a client's address, src/core/store.ts IncrementContext) may
 * add to the memory store's table a second (MEMORY_CALLER_NEW_KEYS_PER_SECOND), so that no
 * single client fills the table for everyone. A GCRA per caller: `perSecond` new counters at once,
 * then one every 1/perSecond s. A caller past it is not refused: the store counts its new keys in
 * the overflow sketches instead (conservatively).
 *
 * One slot per caller seen recently: its theoretical arrival time in a Float64Array, found through
 * a Map from the address (the transport's string, held per connection, so nothing is allocated
 * per request). A caller whose budget is whole again holds no debt and its slot is freed by
 * `sweep`. At most `maxCallers` have a slot of their own (the connection caps keep the real number
 * far lower); past that, the newcomers share one.
 */

/** Float slack in ms. */
const EPS = 1e-6;
/** The slot of the callers past `maxCallers`. */
const SHARED = 0;

export class CallerBudgets {
  private readonly slots = new Map<string, number>();
  private tats = new Float64Array(64);
  /** Slots freed by the sweep, for reuse. */
  private readonly free: number[] = [];
  /** Slots ever handed out (0 is the shared one). */
  private used = 1;
  private readonly intervalMs: number;

  constructor(
    readonly perSecond: number,
    private readonly maxCallers = 65_536,
  ) {
    if (!(perSecond > 0)) throw new RangeError(`new keys per caller per second must be > 0, got ${perSecond}`);
    this.intervalMs = 1000 / perSecond;
  }

  /** Callers holding a slot of their own. */
  get size(): number {
    return this.slots.size;
  }

  /** Takes one new counter from `caller`'s budget at `nowMs`: false (nothing taken) when it is spent. */
  take(caller: string, nowMs: number): boolean {
    let slot = this.slots.get(caller);
    if (slot === undefined) slot = this.assign(caller, nowMs);
    const tat = this.tats[slot]!;
    const next = (tat > nowMs ? tat : nowMs) + this.intervalMs;
    // A burst of `perSecond`: at most one second of arrivals ahead.
    if (next - nowMs > 1000 + EPS) return false;
    this.tats[slot] = next;
    return true;
  }

  /** Frees the slots of callers whose budget is whole again. */
  sweep(nowMs: number): void {
    for (const [caller, slot] of this.slots) {
      if (this.tats[slot]! <= nowMs) {
        this.slots.delete(caller);
        this.free.push(slot);
      }
    }
  }

  clear(): void {
    this.slots.clear();
    this.free.length = 0;
    this.used = 1;
    this.tats.fill(0);
  }

  private assign(caller: string, nowMs: number): number {
    if (this.slots.size >= this.maxCallers) return SHARED;
    let slot = this.free.pop();
    if (slot === undefined) {
      if (this.used === this.tats.length) {
        const grown = new Float64Array(this.tats.length * 2);
        grown.set(this.tats);
        this.tats = grown;
      }
      slot = this.used++;
    }
    this.tats[slot] = nowMs;
    this.slots.set(caller, slot);
    return slot;
  }
}
