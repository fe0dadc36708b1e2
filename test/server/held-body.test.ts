/** Request body storage (src/server/held-body.ts): charged to the request budget while held, all given back. */
import { ByteBudget } from '../../src/server/byte-budget';
import { HeldBody } from '../../src/server/held-body';

const bytes = (n: number, fill: number) => Buffer.alloc(n, fill);

describe('HeldBody', () => {
  it('holds appended bytes whole, charged to the budget by its storage, and gives it all back', () => {
    const budget = new ByteBudget(1 << 20);
    const body = new HeldBody(budget);
    for (let i = 0; i < 10; i++) expect(body.append(bytes(1000, 65 + i), 0, 1000, 1 << 20)).toBe(true);
    expect(body.length).toBe(10_000);
    expect(body.bytes()[0]).toBe(65);
    expect(body.bytes()[9999]).toBe(74);
    // Storage at least doubles as it grows: 16,000 bytes for 10,000 (1,000, 2,000, 4,000, 8,000, 16,000).
    expect(budget.held).toBe(16_000);
    expect(body.take(5000).every((c, i) => c === 65 + Math.floor(i / 1000))).toBe(true);
    body.free();
    expect(budget.held).toBe(0);
  });

  it('refuses what the budget cannot hold, keeping what it held', () => {
    const budget = new ByteBudget(8_000);
    const body = new HeldBody(budget);
    expect(body.append(bytes(5000, 1), 0, 5000, 1 << 20)).toBe(true);
    expect(body.append(bytes(5000, 2), 0, 5000, 1 << 20)).toBe(false);
    expect(body.length).toBe(5000);
    expect(body.bytes().every((c) => c === 1)).toBe(true);
    expect(budget.held).toBe(5000);
    body.free();
    expect(budget.held).toBe(0);
  });
});
