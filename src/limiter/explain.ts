/**
 * The explain tool: for each descriptor of a request, which rule matches and why (exact,
 * wildcard, default, depth rule, placeholder, whitelisted, replaced, unlimited, shadow), the cache
 * key and the stats key — and, against a running service, the current count. Used by
 * `ratelimit-config-check -explain` and the debug port's `/debug/explain`.
 */
import type { CounterOp } from '../core/store';
import type { RateLimitConfig } from '../config/types';
import type { RateLimitRule } from '../core/rule';
import { RULE_STATS_PREFIX } from '../stats/store';
import { cacheKey, keyStem } from './cache-key';
import { candidateOp } from './service';
import { type RateLimitRequest, UNIT_NAMES, unitToDivider } from '../core/rls';
import { errorMessage } from '../platform/errors';

export interface ExplainOptions {
  cacheKeyPrefix: string;
  nowMs: number;
  /** The current count of a key in the store (the running service); undefined when unknown. */
  count?: (op: CounterOp) => Promise<number | undefined>;
}

const HOW: Record<string, string> = {
  exact: 'exact value',
  wildcard: 'wildcard',
  default: 'default (key only)',
  none: 'nothing',
};

export async function explainRequest(config: RateLimitConfig, request: RateLimitRequest, opts: ExplainOptions): Promise<string> {
  const { domain, descriptors } = request;
  const nowS = Math.floor(opts.nowMs / 1000);
  const rules = descriptors.map((d) => config.getLimit(domain, d));
  // Replaces apply across the whole request, as in the service.
  const replacedBy = new Map<string, string>();
  for (const r of rules) {
    if (r === undefined) continue;
    for (const name of r.replaces) replacedBy.set(name, r.fullKey);
  }
  let out = `domain: ${domain}\n`;
  for (let i = 0; i < descriptors.length; i++) {
    const d = descriptors[i]!;
    out += `descriptor ${i}: ${d.entries.map((e) => `${e.key}=${e.value}`).join(', ')}\n`;
    const trace = config.explainMatch(domain, d);
    if (!trace.domainFound) {
      out += `  no rule: ${trace.reason}\n`;
      continue;
    }
    for (const st of trace.steps) {
      out += `  ${st.key}=${st.value}: ${HOW[st.how]}${st.node !== undefined ? ` → ${st.node}${st.hasLimit ? ' (has rate_limit)' : ''}` : ''}\n`;
    }
    const rule = rules[i];
    if (trace.override && rule !== undefined) out += '  limit override from the request (not matched against config)\n';
    if (rule === undefined) {
      out += `  no rule: ${trace.reason ?? 'no rate_limit applies'}\n`;
      continue;
    }
    out += `  rule: ${describeRule(rule)}\n`;
    const by = rule.limit.name !== '' ? replacedBy.get(rule.limit.name) : undefined;
    if (by !== undefined) {
      out += `  outcome: replaced by ${by} (rule name '${rule.limit.name}'): not counted, answers OK\n`;
      continue;
    }
    if (rule.unlimited) {
      out += '  outcome: unlimited: answered OK without counting\n';
      continue;
    }
    const divider = unitToDivider(rule.limit.unit);
    if (divider === 0) {
      out += `  outcome: invalid unit ${rule.limit.unit}: the request is answered with an error\n`;
      continue;
    }
    out += `  outcome: counted${rule.shadowMode ? '; shadow mode: an over-limit answer is turned into OK' : ''}${rule.quotaMode ? '; quota mode' : ''}\n`;
    const key = cacheKey(opts.cacheKeyPrefix, domain, d, rule, nowS, divider);
    out += `  cache key: ${key}\n`;
    out += `  stats key: ${RULE_STATS_PREFIX}${rule.stats.key}\n`;
    if (opts.count !== undefined) {
      let c: number | undefined;
      try {
        c = await opts.count({ key, hits: 0, windowSeconds: divider, rule });
      } catch (err) {
        out += `  count: the store did not answer (${errorMessage(err)})\n`;
        continue;
      }
      out += `  count: ${c === undefined ? 'not available' : `${c} of ${rule.limit.requestsPerUnit} in this window`}\n`;
    }
    const cand = rule.candidate;
    if (cand === undefined) continue;
    out += `  candidate: ${describeLimit(cand)}: counted beside the rule, never changes the answer\n`;
    const enforced: CounterOp = { key, hits: 0, windowSeconds: divider, rule };
    const cop = candidateOp(cand, keyStem(opts.cacheKeyPrefix, domain, d, rule), d.entries, 0, nowS, enforced);
    out += `  candidate cache key: ${cop.key}\n`;
    out += `  candidate stats: ${RULE_STATS_PREFIX}${rule.stats.key}.candidate_would_limit, /debug/candidates\n`;
    if (opts.count !== undefined) {
      let c: number | undefined;
      try {
        c = await opts.count(cop);
      } catch (err) {
        out += `  candidate count: the store did not answer (${errorMessage(err)})\n`;
        continue;
      }
      out += `  candidate count: ${c === undefined || c < 0 ? 'not available' : `${c} of ${cand.limit.requestsPerUnit}`}\n`;
    }
  }
  return out;
}

function describeLimit(r: RateLimitRule): string {
  const algo = r.algorithm !== undefined ? ` (${r.algorithm}${r.algorithm === 'token_bucket' ? `, burst ${r.burst ?? r.limit.requestsPerUnit}` : ''})` : '';
  return `${r.limit.requestsPerUnit} per ${UNIT_NAMES[r.limit.unit] ?? r.limit.unit}${algo}`;
}

function describeRule(r: RateLimitRule): string {
  const what = r.unlimited ? 'unlimited' : `${r.limit.requestsPerUnit} per ${UNIT_NAMES[r.limit.unit] ?? r.limit.unit}`;
  const flags = [r.limit.name !== '' ? `name '${r.limit.name}'` : '', r.shadowMode ? 'shadow_mode' : '', r.quotaMode ? 'quota_mode' : '']
    .filter((f) => f !== '')
    .join(', ');
  return `${r.fullKey}: ${what}${flags !== '' ? ` (${flags})` : ''}`;
}
