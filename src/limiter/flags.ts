/** The service's per-snapshot flags from the reloadable settings. */
import type { ReloadableFlags } from '../settings';
import type { ServiceFlags } from './service';

export function toServiceFlags(r: ReloadableFlags): ServiceFlags {
  return {
    shadowMode: r.shadowMode,
    quotaMode: r.quotaMode,
    responseDynamicMetadata: r.responseDynamicMetadata,
    responseHeadersEnabled: r.responseHeaders.enabled,
    limitHeader: r.responseHeaders.limitHeader,
    remainingHeader: r.responseHeaders.remainingHeader,
    resetHeader: r.responseHeaders.resetHeader,
  };
}
