/**
 * What a paper or live run shows while it runs (the control API and its dashboard read it), made
 * on request from the engine's state. Reading it costs no broker call and changes nothing; its
 * lists are the engine's own (read them at once, do not keep or change them).
 */
import type { ClosedTrade, EquityPoint } from '../results';
import type { AccountInfo, PendingOrder, Position, ProtectionRules } from '../strategy';
import type { SafetyLimits, SafetyLock } from '../protections/safety';

export interface RunView {
  mode: 'paper' | 'live' | 'replay';
  strategy: string;
  /** Wall clock (epoch ms) of the view, and of the run's start (undefined before it). */
  now: number;
  startedAt: number | undefined;
  /** starting: the start-up calls; running; ending: onStop and the flatten; ended. */
  phase: 'starting' | 'running' | 'ending' | 'ended';
  resumed: boolean;
  decisions: number;
  connection: {
    state: 'connecting' | 'connected' | 'disconnected';
    /** Since when it is in that state (epoch ms). */
    since: number | undefined;
    /** The last reconnect, once reconciled with the broker. */
    lastReconnect: { at: number; downMs: number | undefined; closed: number; opened: number } | undefined;
  };
  /** The strategy error that ended the run, if one did. */
  error: { message: string; hook: string } | undefined;
  account: AccountInfo;
  /** This run's own positions and entry orders. */
  positions: Position[];
  orders: PendingOrder[];
  /** The account's others, which the run leaves alone. */
  foreign: { positions: Position[]; orders: PendingOrder[] };
  closed: readonly ClosedTrade[];
  equity: readonly EquityPoint[];
  pnl: { realised: number; unrealised: number; day: number; currency: string };
  /** The safety limits of the run, and the locks on new entries they hold now. */
  protections: { limits: SafetyLimits; rules: ProtectionRules; locks: SafetyLock[] };
  /** When the journal was last cut to a checkpoint (epoch ms). */
  lastCheckpointAt: number | undefined;
}
