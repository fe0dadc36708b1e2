import { RestartBackoff } from '../../../src/app/cluster/backoff';

test('the restart delay doubles while workers die young, up to the cap', () => {
  const b = new RestartBackoff({ initialMs: 100, maxMs: 1000, stableMs: 10_000 });
  expect([b.next(50), b.next(50), b.next(50), b.next(50), b.next(50), b.next(50)]).toEqual([100, 200, 400, 800, 1000, 1000]);
});

test('a worker that ran long enough restarts after the first delay again', () => {
  const b = new RestartBackoff({ initialMs: 100, maxMs: 1000, stableMs: 10_000 });
  b.next(0);
  b.next(0);
  expect(b.next(10_000)).toBe(100);
  expect(b.next(0)).toBe(200);
});

test('a long crash loop stays at the cap (no overflow)', () => {
  const b = new RestartBackoff();
  let last = 0;
  for (let i = 0; i < 2000; i++) last = b.next(0);
  expect(last).toBe(30_000);
});
