/**
 * FX market hours as the broker keeps them: closed from Friday 16:55 to Sunday 17:00 US Eastern
 * time (New York, daylight saving included), open the rest of the week. Holidays are not known.
 */

const MINUTE_MS = 60_000;
const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;

const etHour = new Intl.DateTimeFormat('en-US', { timeZone: 'America/New_York', hour: '2-digit', hourCycle: 'h23' });
/** US Eastern offset from UTC per UTC day (Intl is slow and the offset rarely changes). */
const easternOffsets = new Map<number, number>();

/**
 * US Eastern offset (ms, negative) on the UTC day holding `ms`, read at 12:00 UTC. The clocks change
 * on Sundays at 02:00 local time, before 12:00 UTC and while the FX market is closed anyway.
 */
function easternOffsetMs(ms: number): number {
  const day = Math.floor(ms / DAY_MS);
  let offset = easternOffsets.get(day);
  if (offset === undefined) {
    offset = (Number(etHour.format(new Date(day * DAY_MS + 12 * HOUR_MS))) - 12) * HOUR_MS;
    easternOffsets.set(day, offset);
  }
  return offset;
}

const SUNDAY = 0;
const FRIDAY = 5;
const SATURDAY = 6;
/** 17:00 New York: the market opens on Sunday at it, and the daily rollover ends each trading day there. */
const ROLLOVER_HOUR = 17;
const FX_CLOSE_MINUTES = 16 * 60 + 55;
const FX_OPEN_MINUTES = ROLLOVER_HOUR * 60;

/** Is the FX market open at `ms` (epoch milliseconds)? */
export function isFxMarketOpen(ms: number): boolean {
  const local = ms + easternOffsetMs(ms);
  const day = Math.floor(local / DAY_MS);
  const weekday = (day + 4) % 7; // 1970-01-01 was a Thursday
  const minutes = Math.floor((local - day * DAY_MS) / MINUTE_MS);
  if (weekday === SATURDAY) return false;
  if (weekday === FRIDAY && minutes >= FX_CLOSE_MINUTES) return false;
  if (weekday === SUNDAY && minutes < FX_OPEN_MINUTES) return false;
  return true;
}

/**
 * The market opens and closes on whole 5 minutes of US Eastern time, whose offset is whole hours,
 * so it is open or closed for the whole of every 5-minute step of UTC.
 */
const STEP_S = 300;

/** Seconds of [fromSec, toSec) during which the FX market is open. */
export function fxOpenSeconds(fromSec: number, toSec: number): number {
  let open = 0;
  for (let t = fromSec; t < toSec; ) {
    const next = Math.min(toSec, (Math.floor(t / STEP_S) + 1) * STEP_S);
    if (isFxMarketOpen(t * 1000)) open += next - t;
    t = next;
  }
  return open;
}

const WEDNESDAY = 3;

/**
 * The broker's trading day of `ms`: days end at 17:00 New York (the rollover), so the Sunday
 * evening session belongs to Monday and a week has five trading days. A day number, not a date.
 */
export function fxTradingDay(ms: number): number {
  return Math.floor((ms + easternOffsetMs(ms) + (24 - ROLLOVER_HOUR) * HOUR_MS) / DAY_MS);
}

/** 17:00 New York (the daily rollover) on the UTC day starting at `dayStartMs`: 21:00 or 22:00 UTC, the same date in both places. */
export function newYorkFivePm(dayStartMs: number): number {
  return dayStartMs + ROLLOVER_HOUR * HOUR_MS - easternOffsetMs(dayStartMs);
}

/**
 * The broker's daily rollovers in (fromMs, toMs]: 17:00 New York, Monday to Friday (Friday's at the
 * weekend close covers the hold over the weekend's first day), each with the days of interest it
 * books. Spot FX settles two days after the trade, so Wednesday's rollover moves the value date
 * over the weekend and counts three days: seven a week in all.
 */
export function rolloversBetween(fromMs: number, toMs: number): { ms: number; days: number }[] {
  const out: { ms: number; days: number }[] = [];
  for (let day = Math.floor(fromMs / DAY_MS); day * DAY_MS <= toMs; day++) {
    const ms = newYorkFivePm(day * DAY_MS);
    const weekday = (day + 4) % 7;
    if (ms > fromMs && ms <= toMs && weekday !== SATURDAY && weekday !== SUNDAY) out.push({ ms, days: weekday === WEDNESDAY ? 3 : 1 });
  }
  return out;
}
