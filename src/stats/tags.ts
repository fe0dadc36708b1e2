/**
 * gostats tags. A stat name may carry tags serialised gostats' way, as `.__k=v` suffixes sorted by
 * key (`ratelimit.memcache.multiget.__code=success`). EXTRA_TAGS are merged into every stat of the
 * `ratelimit` and `ratelimit_server` scopes, as upstream applies them to those two scopes only.
 * Each sink then uses the tagged name its own way: statsd sends the serialised name, DogStatsD
 * sends the base name with `k:v` tags, Prometheus turns the tags into labels.
 */

/** The scopes EXTRA_TAGS apply to (upstream: `ScopeWithTags("ratelimit", …)` and the server's scope). */
export const EXTRA_TAG_SCOPES: readonly string[] = ['ratelimit', 'ratelimit_server'];

/** gostats' ReplaceChars: `.`, `:` and `|` in a tag value become `_`. */
export function replaceTagChars(value: string): string {
  return /[.:|]/.test(value) ? value.replace(/[.:|]/g, '_') : value;
}

export type Tag = readonly [key: string, value: string];

/** A stat name split into its base name and its tags, and the two serialised back. */
export interface TaggedName {
  /** The name without tags. */
  readonly base: string;
  /** The tags, sorted by key, values cleaned. */
  readonly tags: readonly Tag[];
  /** `base` followed by `.__k=v` for each tag (gostats' serialisation). */
  readonly serialized: string;
}

/**
 * Splits the trailing `.__k=v` segments off a name. Only trailing segments are read, so a name
 * whose stats key happens to contain `.__` elsewhere keeps it (rule stats end with their stat name).
 */
export function splitTags(name: string): { base: string; tags: Tag[] } {
  const tags: Tag[] = [];
  let end = name.length;
  for (;;) {
    const dot = name.lastIndexOf('.__', end - 1);
    if (dot < 0) break;
    const seg = name.slice(dot + 3, end);
    const eq = seg.indexOf('=');
    if (eq <= 0 || seg.indexOf('.') >= 0) break;
    tags.push([seg.slice(0, eq), seg.slice(eq + 1)]);
    end = dot;
  }
  tags.reverse();
  return { base: name.slice(0, end), tags };
}

/** gostats' serialisation: `name.__k1=v1.__k2=v2`, tags sorted by key, empty keys or values left out. */
export function serializeTags(base: string, tags: readonly Tag[]): string {
  let out = base;
  for (const [k, v] of tags) out += '.__' + k + '=' + v;
  return out;
}

function inScope(name: string, scopes: readonly string[]): boolean {
  for (const s of scopes) {
    if (name === s || (name.length > s.length && name.startsWith(s) && name.charCodeAt(s.length) === 46)) return true;
  }
  return false;
}

/**
 * Resolves store names to tagged names with EXTRA_TAGS merged in (a tag already in the name wins,
 * as gostats' MergeTags lets the stat's own tags win over the scope's). Results are cached: the
 * store bounds the number of names.
 */
export class TagNamer {
  private readonly extra: readonly Tag[];
  private readonly cache = new Map<string, TaggedName>();

  constructor(
    extraTags: Readonly<Record<string, string>> = {},
    private readonly scopes: readonly string[] = EXTRA_TAG_SCOPES,
  ) {
    this.extra = Object.entries(extraTags)
      .filter(([k, v]) => k !== '' && v !== '')
      .map(([k, v]): Tag => [k, replaceTagChars(v)]);
  }

  /** Drops a retired name from the cache (its series is gone for good). */
  forget(name: string): void {
    this.cache.delete(name);
  }

  resolve(name: string): TaggedName {
    let t = this.cache.get(name);
    if (t === undefined) {
      t = this.compute(name);
      this.cache.set(name, t);
    }
    return t;
  }

  private compute(raw: string): TaggedName {
    // A line break would split a statsd line in two (names can carry request data).
    const name = /[\r\n]/.test(raw) ? raw.replace(/[\r\n]/g, '_') : raw;
    const { base, tags } = splitTags(name);
    if (tags.length === 0 && (this.extra.length === 0 || !inScope(name, this.scopes))) {
      return { base: name, tags: [], serialized: name };
    }
    const merged = new Map<string, string>();
    if (inScope(base, this.scopes)) for (const [k, v] of this.extra) merged.set(k, v);
    for (const [k, v] of tags) if (k !== '' && v !== '') merged.set(k, replaceTagChars(v));
    const sorted = [...merged.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    return { base, tags: sorted, serialized: serializeTags(base, sorted) };
  }
}
