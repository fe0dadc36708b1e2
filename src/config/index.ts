/** Config loading and lookup: the public surface of `src/config`. */
export { ConfigError } from './types';
export type { ConfigFile, RateLimitConfig, RateLimitRule } from './types';
export { loadConfig, loadConfigFromObjects } from './load';
export type { ConfigObject, LoadOptions } from './load';
