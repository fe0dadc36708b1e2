/** The limiter's public API, for code outside the service (the strategy runner). */
export { createInProcessLimiter, type InProcessLimiter, type InProcessLimiterOptions } from './in-process';
export type { ConfigFile, RateLimitConfig } from '../config/types';
export { ConfigError } from '../config/types';
