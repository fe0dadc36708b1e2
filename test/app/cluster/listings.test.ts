/**
 * A worker's /rlconfig listings: pieces one at a time, '' at the end, closed when the client
 * leaves or the primary stops pulling, and a bound on how many are open.
 */
import { LISTING_IDLE_MS, Listings, MAX_OPEN_LISTINGS } from '../../../src/app/cluster/listings';

function* counted(n: number, state: { taken: number; closed: boolean }): Generator<string> {
  try {
    for (; state.taken < n; state.taken++) yield `line ${state.taken}\n`;
  } finally {
    state.closed = true;
  }
}

test('pieces one per pull, then \'\' once, and the listing is gone', () => {
  const listings = new Listings();
  const state = { taken: 0, closed: false };
  expect(listings.start(7, counted(3, state))).toBe('line 0\n');
  expect(state.taken).toBe(0); // the generator has not run past the piece it gave
  expect(listings.next(7)).toBe('line 1\n');
  expect(listings.next(7)).toBe('line 2\n');
  expect(listings.next(7)).toBe('');
  expect(state.closed).toBe(true);
  expect(listings.size).toBe(0);
  expect(() => listings.next(7)).toThrow('listing 7 is not open');
});

test('an empty config is over at once; empty pieces are skipped, never sent as the end', () => {
  const listings = new Listings();
  expect(listings.start(1, [])).toBe('');
  expect(listings.size).toBe(0);
  expect(listings.start(2, ['', 'a\n', '', '', 'b\n'])).toBe('a\n');
  expect(listings.next(2)).toBe('b\n');
  expect(listings.next(2)).toBe('');
});

test('end() closes the iterator before its end; a listing not pulled for a while is dropped', () => {
  jest.useFakeTimers();
  try {
    const listings = new Listings();
    const left = { taken: 0, closed: false };
    listings.start(1, counted(1_000, left));
    listings.end(1);
    expect(left.closed).toBe(true);
    expect(left.taken).toBeLessThan(1_000);

    const idle = { taken: 0, closed: false };
    listings.start(2, counted(1_000, idle));
    jest.advanceTimersByTime(LISTING_IDLE_MS - 1);
    expect(listings.next(2)).toBe('line 1\n'); // a pull restarts the idle time
    jest.advanceTimersByTime(LISTING_IDLE_MS - 1);
    expect(idle.closed).toBe(false);
    jest.advanceTimersByTime(1);
    expect(idle.closed).toBe(true);
    expect(() => listings.next(2)).toThrow('not open');
  } finally {
    jest.useRealTimers();
  }
});

test(`at most ${MAX_OPEN_LISTINGS} open at once; a listing whose pieces throw is closed`, () => {
  const listings = new Listings();
  for (let i = 0; i < MAX_OPEN_LISTINGS; i++) listings.start(i, ['a\n', 'b\n']);
  expect(() => listings.start(99, ['a\n'])).toThrow(`${MAX_OPEN_LISTINGS} listings (/rlconfig, /debug/rlqs) are in progress`);
  listings.end(0);
  function* broken(): Generator<string> {
    yield 'a\n';
    throw new Error('config gone');
  }
  expect(listings.start(99, broken())).toBe('a\n');
  expect(() => listings.next(99)).toThrow('config gone');
  expect(listings.size).toBe(MAX_OPEN_LISTINGS - 1);
  for (let i = 1; i < MAX_OPEN_LISTINGS; i++) listings.end(i);
});
