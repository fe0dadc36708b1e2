/** Config loading and lookup: the public surface of `src/config`. */
export { ConfigError } from './types';
export type { ConfigFile, RateLimitConfig } from './types';
export type { RateLimitRule } from '../core/rule';
export { loadConfig, loadConfigFromObjects } from './load';
export type { ConfigObject, LoadOptions } from './load';
