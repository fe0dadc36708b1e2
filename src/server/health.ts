/**
 * Overall health is healthy only when every enabled component is (upstream `server/health.go`):
 * the counter store, the config (only with HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED) and the
 * termination signal. gRPC Watch streams and /healthcheck read it here.
 */
export class Health {
  private readonly components = new Map<string, boolean>();
  private readonly listeners = new Set<(healthy: boolean) => void>();
  private last = true;

  /** Registers a component with its initial state. */
  add(name: string, healthy: boolean): void {
    this.components.set(name, healthy);
    this.changed();
  }

  set(name: string, healthy: boolean): void {
    if (!this.components.has(name) || this.components.get(name) === healthy) return;
    this.components.set(name, healthy);
    this.changed();
  }

  isHealthy(): boolean {
    for (const ok of this.components.values()) if (!ok) return false;
    return true;
  }

  /** Component states for logs and the debug page. */
  states(): ReadonlyMap<string, boolean> {
    return this.components;
  }

  onChange(listener: (healthy: boolean) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(): void {
    const now = this.isHealthy();
    if (now === this.last) return;
    this.last = now;
    for (const l of this.listeners) l(now);
  }
}
