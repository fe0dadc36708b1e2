/**
 * The Lua scripts of the Redis store: the atomic algorithms (sliding window, token bucket) and
 * REDIS_BATCH_SCRIPT's batched INCRBY/EXPIRE, with the arguments of one op.
 */
import { createHash } from 'node:crypto';
import { emissionMs } from '../../core/algorithms';
import type { CounterOp } from '../../core/store';

/**
 * sliding_window and token_bucket (src/limiter/algorithms.ts), decided and written atomically in
 * one script call per op: EVALSHA, pipelined with the request's other commands; on NOSCRIPT (first
 * use on a server, or after a restart or SCRIPT FLUSH) that op is sent once more with EVAL, which
 * caches the script. The time is the service's (ARGV), so every instance shares one clock source
 * per request and a test clock works. Returns the op's effective count after.
 *   KEYS[1] key, KEYS[2] previous window's key (sliding); ARGV: mode (s|t), hits, now ms,
 *   window ms, then limit (s) or emission interval ms and burst (t).
 */
export const ALGORITHM_SCRIPT = `
local hits = tonumber(ARGV[2])
local now = tonumber(ARGV[3])
local win = tonumber(ARGV[4])
if ARGV[1] == 's' then
  local limit = tonumber(ARGV[5])
  local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
  local prev = tonumber(redis.call('GET', KEYS[2]) or '0')
  local into = now % win
  local count = math.ceil(cur + hits + prev * (win - into) / win)
  if count <= limit and hits > 0 then
    redis.call('INCRBY', KEYS[1], hits)
    redis.call('PEXPIRE', KEYS[1], 2 * win - into)
  end
  return count
end
local emission = tonumber(ARGV[5])
local burst = tonumber(ARGV[6])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local newtat = tat + hits * emission
local used = newtat - now
local level = math.ceil(used / emission - 1e-6)
if used <= burst * emission + 1e-6 then
  if hits > 0 then redis.call('SET', KEYS[1], string.format('%.3f', newtat), 'PX', math.ceil(used) + 1000) end
  if level > burst then level = burst end
  return level
end
if level < burst + 1 then level = burst + 1 end
return level
`;
export const ALGORITHM_SCRIPT_SHA = createHash('sha1').update(ALGORITHM_SCRIPT).digest('hex');

/**
 * REDIS_BATCH_SCRIPT: every INCRBY + EXPIRE pair of one pipeline in a single EVAL, so the client
 * builds and parses one command instead of two per key (in cluster mode, where ioredis's pipeline
 * still costs a Command and a promise per command). Keys, counts and TTLs are exactly the pipeline's;
 * a failing key (WRONGTYPE…) fails only its own entry, as in a pipeline. Sent with EVAL, not
 * EVALSHA: one per pipeline, so the script text is cheap and NOSCRIPT cannot happen.
 *   KEYS: the keys; ARGV: the n addends, then the n TTLs. Returns the counts (or per-key errors).
 */
export const INCREMENT_SCRIPT = `
local n = #KEYS
local out = {}
for i = 1, n do
  local c = redis.pcall('INCRBY', KEYS[i], ARGV[i])
  if type(c) == 'number' then
    local e = redis.pcall('EXPIRE', KEYS[i], ARGV[n + i])
    if type(e) == 'table' then c = e end
  end
  out[i] = c
end
return out
`;

/** The script's KEYS and ARGV for one op. */
export function scriptArgs(op: CounterOp, nowMs: number): [number, ...Array<string | number>] {
  const win = op.windowSeconds * 1000;
  if (op.rule.algorithm === 'token_bucket') {
    return [1, op.key, 't', op.hits, nowMs, win, emissionMs(op.rule, op.windowSeconds), op.rule.burst ?? op.rule.limit.requestsPerUnit];
  }
  return [2, op.key, op.prevKey ?? op.key, 's', op.hits, nowMs, win, op.rule.limit.requestsPerUnit];
}
