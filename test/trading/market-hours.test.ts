/** FX hours of the broker client's vocabulary (fxcm/market-hours.ts), which `candles check` judges gaps by. */
import { fxOpenSeconds, isFxMarketOpen } from '../../src/trading/fxcm/market-hours';
import { isFxMarketOpen as simulatorHours } from '../../src/trading/simulator';

const s = (ms: number) => ms / 1000;

describe('FX market hours', () => {
  test('closed Friday 16:55 to Sunday 17:00 New York, in summer and in winter time', () => {
    expect(isFxMarketOpen(Date.UTC(2024, 2, 13, 12))).toBe(true); // Wed
    expect(isFxMarketOpen(Date.UTC(2024, 2, 15, 20, 54))).toBe(true); // Fri 16:54 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 15, 20, 55))).toBe(false); // Fri 16:55 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 16, 12))).toBe(false); // Sat
    expect(isFxMarketOpen(Date.UTC(2024, 2, 17, 20, 59))).toBe(false); // Sun 16:59 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 2, 17, 21, 0))).toBe(true); // Sun 17:00 EDT
    expect(isFxMarketOpen(Date.UTC(2024, 0, 5, 21, 54))).toBe(true); // Fri 16:54 EST
    expect(isFxMarketOpen(Date.UTC(2024, 0, 5, 21, 55))).toBe(false); // Fri 16:55 EST
    expect(isFxMarketOpen(Date.UTC(2024, 0, 7, 22, 0))).toBe(true); // Sun 17:00 EST
  });

  test('the same hours as the simulated broker, every 5 minutes of a year', () => {
    const differ: string[] = [];
    for (let t = Date.UTC(2024, 0, 1); t < Date.UTC(2025, 0, 1); t += 300_000) {
      if (isFxMarketOpen(t) !== simulatorHours(t)) differ.push(new Date(t).toISOString());
    }
    expect(differ).toEqual([]);
  });

  test('open seconds of a range: a weekend has none, its edges count to the second', () => {
    const friClose = s(Date.UTC(2024, 2, 15, 20, 55));
    const sunOpen = s(Date.UTC(2024, 2, 17, 21, 0));
    expect(fxOpenSeconds(friClose, sunOpen)).toBe(0);
    expect(fxOpenSeconds(friClose - 90, sunOpen + 30)).toBe(120);
    expect(fxOpenSeconds(friClose - 7, friClose - 2)).toBe(5);
    const wed = s(Date.UTC(2024, 2, 13, 12));
    expect(fxOpenSeconds(wed, wed + 86400)).toBe(86400);
    expect(fxOpenSeconds(wed, wed)).toBe(0);
  });
});
