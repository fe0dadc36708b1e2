export * from './server';
export * from './market';
export * from './accounts';
export * from './faults';
export * from '../../core/clock';
export * from './cli-options';
