export * from './server';
export * from './market';
export * from './accounts';
export * from './faults';
export * from './clock';
export * from './cli-options';
