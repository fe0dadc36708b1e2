export * from './types';
export * from './errors';
export * from './rules';
export * from './candles';
export * from './rest';
export * from './stream';
export * from './client';
