/** The `request string` span attribute: the request in protobuf text form, as upstream's String(). */
import type { RateLimitRequest } from '../core/rls';

export function requestText(r: RateLimitRequest): string {
  let out = `domain:${JSON.stringify(r.domain)}`;
  for (const d of r.descriptors) {
    out += ' descriptors:{';
    out += d.entries.map((e) => `entries:{key:${JSON.stringify(e.key)} value:${JSON.stringify(e.value)}}`).join(' ');
    if (d.limit !== undefined) out += ` limit:{requests_per_unit:${d.limit.requestsPerUnit} unit:${d.limit.unit}}`;
    if (d.hitsAddend !== undefined) out += ` hits_addend:{value:${d.hitsAddend}}`;
    out += '}';
  }
  if (r.hitsAddend !== 0) out += ` hits_addend:${r.hitsAddend}`;
  return out;
}
