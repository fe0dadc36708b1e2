/**
 * How the debug pages and log lines about limits (denials, hot keys) show a descriptor value or a
 * client address, which may be personal data (DEBUG_VALUES):
 * - `plain`: as it came;
 * - `hash`: `#` and 16 hex digits of an HMAC-SHA256 under a key drawn when the process starts, so
 *   one value reads the same on every page and line of this process (it can be followed, and
 *   compared with `describeValue('hash', v)` of a suspected value in this process), but not
 *   across processes or restarts, and it cannot be reversed by hashing a list of guesses elsewhere;
 * - `hide`: `(hidden)`.
 * It is called when a page or a line is made, never on the decision path.
 */
import { createHmac, randomBytes } from 'node:crypto';

export type ValuePrivacy = 'plain' | 'hash' | 'hide';
export const VALUE_PRIVACY_MODES: readonly ValuePrivacy[] = ['plain', 'hash', 'hide'];

/** Drawn once per process: what makes a hash stable here and meaningless elsewhere. */
const KEY = randomBytes(32);

export const HIDDEN_VALUE = '(hidden)';

export function describeValue(mode: ValuePrivacy, value: string): string {
  if (mode === 'plain') return value;
  if (mode === 'hide') return HIDDEN_VALUE;
  return '#' + createHmac('sha256', KEY).update(value).digest('hex').slice(0, 16);
}
