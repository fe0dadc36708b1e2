/** The Redis counter store (REDIS_*): see store.ts for the commands and connection.ts for the clients. */
export { RedisStore, toStoreError, type RedisStoreOptions } from './store';
export { RedisConnection, maskUrl, parseAddress, parseAuth, type RedisClient, type SharedRedisSettings } from './connection';
