/** Redis failures as the limiter sees them: a StoreError, transient or not. */
import { StoreError } from '../../core/store';
import { errorText } from './connection';

/** Reply errors that go away by themselves (failover, resharding, loading, busy script). */
const TRANSIENT_REPLIES = new Set([
  'CLUSTERDOWN',
  'LOADING',
  'TRYAGAIN',
  'MOVED',
  'ASK',
  'MASTERDOWN',
  'READONLY',
  'BUSY',
  'NOREPLICAS',
  'NOTBUSY',
]);

/**
 * A StoreError with the error's text. Reply errors from Redis are transient only for the codes
 * above; anything else that is not a reply (lost connection, timeout, cluster not ready, too many
 * redirections) is transient.
 */
export function toStoreError(err: unknown): StoreError {
  if (err instanceof StoreError) return err;
  const message = errorText(err);
  if (err instanceof Error && err.name === 'ReplyError') {
    const sp = message.indexOf(' ');
    return new StoreError(message, TRANSIENT_REPLIES.has(sp < 0 ? message : message.slice(0, sp)));
  }
  return new StoreError(message, true);
}
