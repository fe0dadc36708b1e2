import { isoUtc, isoUtcMinutes } from '../../src/platform/time-text';

test('ISO 8601 UTC: milliseconds only when there are some; a whole minute without its seconds', () => {
  const t = Date.UTC(2024, 0, 2, 10, 15);
  expect(isoUtc(t)).toBe('2024-01-02T10:15:00Z');
  expect(isoUtc(t + 7_250)).toBe('2024-01-02T10:15:07.250Z');
  expect(isoUtcMinutes(t)).toBe('2024-01-02T10:15Z');
  expect(isoUtcMinutes(t + 7_000)).toBe('2024-01-02T10:15:07Z');
});
