export * from './server';
export * from './market';
export * from './book';
export * from './engine';
export * from './form';
export { brokerTime } from './records';
export * from './faults';
export * from '../../platform/clock';
export * from './cli-options';
