/** Settings: environment → one typed, frozen object (see `settings.ts`). */
export * from './settings';
export { parseBool, parseInt64, parseFloat64, parseDurationMs, goDurationNanos, parseList, parseMap } from './parsers';
