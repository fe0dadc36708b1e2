/** The Redis counter store (REDIS_*): see store.ts for the commands and connection.ts for the clients. */
export { RedisStore, type RedisStoreOptions } from './store';
export { toStoreError } from './errors';
export { RedisConnection, maskUrl, parseAddress, parseAuth, type RedisClient, type SharedRedisSettings } from './connection';
export { RedisDemandStore } from './demand';
