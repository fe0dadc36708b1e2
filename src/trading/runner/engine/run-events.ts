/**
 * What a paper or live run tells the outside while it runs (webhooks, notify/): the kinds of
 * event and the callback the engine calls. The engine calls it as things happen, never in a
 * replay, and what the callback does cannot touch the run (it must return at once; an exception
 * from it is dropped).
 */
export type RunEventKind =
  | 'run_started'
  | 'entry_sent'
  | 'filled'
  | 'exit'
  | 'order_refused'
  | 'disconnected'
  | 'reconnected'
  | 'budget_exhausted'
  | 'protection_locked'
  | 'operator'
  | 'strategy_error'
  | 'run_ended'
  | 'heartbeat';

export type RunEvents = (kind: RunEventKind, details: Record<string, unknown>) => void;
