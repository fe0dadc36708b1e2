import type { Descriptor } from '../core/rls';

/** Parses `k=v,k2=v2` (upstream's -descriptors syntax) into a descriptor; a value may contain `=`. */
export function parseDescriptor(text: string): Descriptor {
  const entries = text.split(',').map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new Error(`invalid descriptor entry "${pair}": expected <key>=<value>`);
    return { key: pair.slice(0, eq), value: pair.slice(eq + 1) };
  });
  return { entries };
}
