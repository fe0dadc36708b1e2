/**
 * Wire types of the FXCM Socket REST API (seed 000 + reference §1). Record field lists follow
 * the v2.1.3 spec; unknown extra fields are kept (records are open objects).
 */

export const MODELS = ['Offer', 'OpenPosition', 'ClosedPosition', 'Order', 'Summary', 'LeverageProfile', 'Account', 'Properties'] as const;
export type ModelName = (typeof MODELS)[number];

/** Models that can be subscribed with /trading/subscribe (Offer is accepted as the samples use it). */
export const SUBSCRIBABLE_MODELS: readonly ModelName[] = ['Offer', 'OpenPosition', 'ClosedPosition', 'Order', 'Summary', 'Account'];

/** Snapshot key of each model in the get_model response. */
export const MODEL_SNAPSHOT_KEY: Record<ModelName, string> = {
  Offer: 'offers',
  OpenPosition: 'open_positions',
  ClosedPosition: 'closed_positions',
  Order: 'orders',
  Summary: 'summary',
  LeverageProfile: 'leverage_profile',
  Account: 'accounts',
  Properties: 'properties',
};

/** Merge key of pushed records per model (U / no-action pushes are partial records carrying this key). */
export const MODEL_KEY: Partial<Record<ModelName, string>> = {
  Offer: 'offerId',
  OpenPosition: 'tradeId',
  ClosedPosition: 'tradeId',
  Order: 'orderId',
  Account: 'accountId',
  Summary: 'offerId',
  Properties: 'offerId',
};

/** Table ids (`t` field). */
export const TABLE_ID: Partial<Record<ModelName, number>> = {
  Offer: 0,
  OpenPosition: 1,
  ClosedPosition: 2,
  Order: 3,
  Summary: 5,
  Account: 6,
};

export function isModelName(s: string): s is ModelName {
  return (MODELS as readonly string[]).includes(s);
}

export type TableAction = 'I' | 'U' | 'D';

/** Any pushed or snapshot record. */
export type TableRecord = Record<string, unknown> & { t?: number; action?: TableAction };

export interface OrderRecord extends TableRecord {
  t: 3;
  ratePrecision: number;
  orderId: string;
  tradeId: string;
  time: string;
  accountName: string;
  accountId: string;
  timeInForce: string;
  expireDate: string;
  currency: string;
  isBuy: boolean;
  buy: number;
  sell: number;
  type: string;
  status: number;
  amountK: number;
  currencyPoint: number;
  stopMove: number;
  stop: number;
  stopRate: number;
  limit: number;
  limitRate: number;
  isEntryOrder: boolean;
  ocoBulkId: number;
  isNetQuantity: boolean;
  isLimitOrder: boolean;
  isStopOrder: boolean;
  isELSOrder: boolean;
  stopPegBaseType: number;
  limitPegBaseType: number;
  range: number;
}

/** Order status values (reference §1.3). */
export const ORDER_STATUS = {
  Unknown: 0,
  Waiting: 1,
  InProcess: 2,
  Canceled: 3,
  Requoted: 4,
  MarginCall: 5,
  Executing: 6,
  Pending: 7,
  EquityStop: 8,
  Executed: 9,
  Activated: 10,
} as const;

export interface OpenPositionRecord extends TableRecord {
  tradeId: string;
  accountName: string;
  accountId: string;
  currency: string;
  isBuy: boolean;
  amountK: number;
  open: number;
  close: number;
  grossPL: number;
  visiblePL: number;
  stop: number;
  stopMove: number;
  limit: number;
  time: string;
}

export interface AccountRecord extends TableRecord {
  accountId: string;
  accountName: string;
  balance: number;
  equity: number;
  usableMargin: number;
  hedging: string;
}

export interface OfferRecord extends TableRecord {
  offerId: number;
  currency: string;
  sell: number;
  buy: number;
  pip: number;
  ratePrecision: number;
}

/** Pushed price event payload (event name = symbol). Rates = [bid, ask, high, low]. */
export interface PriceUpdate {
  Updated: number;
  Rates: number[];
  Symbol: string;
}

export interface Instrument {
  symbol: string;
  visible: boolean;
  order: number;
}

/** The response envelope. */
export interface Envelope {
  response: { executed: boolean; error?: string };
  [key: string]: unknown;
}

export interface OrderResult {
  type: number;
  orderId: string;
}

export type OrderType = 'AtMarket' | 'MarketRange' | 'Entry' | 'RangeEntry';
export type TimeInForce = 'GTC' | 'DAY' | 'GTD' | 'IOC' | 'FOK';

/** Candle periods; `m1` (minute) and `M1` (month) differ only by case. */
export const PERIODS = ['m1', 'm5', 'm15', 'm30', 'H1', 'H2', 'H3', 'H4', 'H6', 'H8', 'D1', 'W1', 'M1'] as const;
export type Period = (typeof PERIODS)[number];

/** One candle: [ts (s), bidopen, bidclose, bidhigh, bidlow, askopen, askclose, askhigh, asklow, tickqty]. */
export type CandleRow = [number, number, number, number, number, number, number, number, number, number];

export interface Candle {
  ts: number;
  bidOpen: number;
  bidClose: number;
  bidHigh: number;
  bidLow: number;
  askOpen: number;
  askClose: number;
  askHigh: number;
  askLow: number;
  tickQty: number;
}

/** Form / query parameter value; arrays are sent as repeated keys. */
export type ParamValue = string | number | boolean | readonly (string | number | boolean)[] | undefined;
export type Params = Record<string, ParamValue>;
