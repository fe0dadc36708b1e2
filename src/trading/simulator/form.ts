/**
 * A request to the simulated broker: its form fields, read as the broker reads them (a missing or
 * malformed number is 0, a list is repeated keys or comma-separated), and its errors.
 */
import type { BrokerErrorBody } from '../fxcm/errors';

/** A request error: the `error` string of the envelope (a JSON broker body or plain text). */
export class SimRequestError extends Error {
  constructor(readonly error: string) {
    super(error);
  }
  static body(b: BrokerErrorBody): SimRequestError {
    return new SimRequestError(JSON.stringify(b));
  }
}

/** Why a bearer is refused: the broker's `Unauthorized`, then the cause, which the broker does not give. */
export const UNAUTHORIZED = {
  noBearer: 'Unauthorized: no bearer (send Authorization: Bearer <socket id><token>)',
  unknownToken: 'Unauthorized: unknown token',
  sessionTaken: 'Unauthorized: token already has a streaming session on another connection (one session per token; use one token per runner)',
  noConnection: 'Unauthorized: the socket id in the bearer is not a live connection (connect, then send the new socket id)',
} as const;

export type Form = Record<string, string | string[] | undefined>;

export const flagOf = (v: unknown): boolean => v === true || v === 'true' || v === '1';

export function numberOf(v: unknown, otherwise = 0): number {
  if (v === undefined || v === '' || Array.isArray(v)) return otherwise;
  const n = Number(v);
  return Number.isFinite(n) ? n : otherwise;
}

export const textOf = (v: unknown): string => (Array.isArray(v) ? String(v[0] ?? '') : v === undefined ? '' : String(v));

export const listOf = (v: unknown): string[] => (v === undefined ? [] : Array.isArray(v) ? v.map(String) : String(v).split(',').filter(Boolean));
