/** The open-file limit read from /proc/self/limits, and the connections that leave room in it. */
import { connectionsWithin, openFileLimit } from '../../src/platform/open-files';

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            20000                524288               files
Max locked memory         8388608              8388608              bytes
`;

test('the soft limit on open files', () => {
  expect(openFileLimit(() => LIMITS)).toBe(20_000);
  expect(openFileLimit(() => LIMITS.replace('20000  ', 'unlimited'))).toBeUndefined();
  expect(
    openFileLimit(() => {
      throw new Error('ENOENT');
    }),
  ).toBeUndefined();
  // On this machine (Linux) it is readable.
  expect(openFileLimit()).toBeGreaterThan(0);
});

test('a tenth is kept for the rest of the process, at least 256 but never more than half', () => {
  expect(connectionsWithin(20_000)).toBe(18_000);
  expect(connectionsWithin(1024)).toBe(768);
  expect(connectionsWithin(300)).toBe(150);
  expect(connectionsWithin(1)).toBe(1);
});
