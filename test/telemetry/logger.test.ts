import { createLogger, silentLogger } from '../../src/telemetry/logger';

function capture(level: string, format: string): { lines: string[]; log: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  return { lines, log: createLogger({ level, format, write: (l) => void lines.push(l) }) };
}

describe('the logger (logrus-compatible lines)', () => {
  test('text: time, level (warn is "warning"), quoted msg', () => {
    const { lines, log } = capture('debug', 'text');
    log.warn('store "down"');
    expect(lines[0]).toMatch(/^time="\d{4}-\d\d-\d\dT[\d:.]+Z" level=warning msg="store \\"down\\""\n$/);
  });

  test('text: fields follow as key=value, quoted unless a plain word', () => {
    const { lines, log } = capture('info', 'text');
    log.info('fxcm reconnected', { sid: 'abc-1', attempt: 2, error: 'socket hang up', ok: true });
    expect(lines[0]).toMatch(/ msg="fxcm reconnected" sid=abc-1 attempt=2 error="socket hang up" ok=true\n$/);
  });

  test('json: @timestamp, @message, level, and the fields as keys (never overriding those three)', () => {
    const { lines, log } = capture('info', 'json');
    log.error('boom', { code: 7, level: 'x' });
    const o = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(o).toEqual({ '@timestamp': expect.any(String), '@message': 'boom', level: 'error', code: 7 });
  });

  test('levels below LOG_LEVEL are dropped; "warning" is warn; an unknown level is warn', () => {
    const { lines, log } = capture('WARNING', 'text');
    log.info('no');
    log.debug('no');
    log.warn('yes');
    expect(lines).toHaveLength(1);
    expect(log.enabled('warn')).toBe(true);
    expect(log.enabled('info')).toBe(false);
    expect(capture('bogus', 'text').log.enabled('info')).toBe(false);
  });

  test('the silent logger writes nothing and enables nothing', () => {
    expect(() => silentLogger.error('x', { a: 1 })).not.toThrow();
    expect(silentLogger.enabled('error')).toBe(false);
  });
});

test('the plain format (the runner\'s ctx.log): [level] message {fields}, from the level up, no time', () => {
  const lines: string[] = [];
  const log = createLogger({ level: 'info', format: 'plain', write: (l) => lines.push(l) });
  log.debug('hidden');
  log.info('bar closed', { symbol: 'EUR/USD', close: 1.1 });
  log.warn('no fields', {});
  expect(lines).toEqual(['[info] bar closed {"symbol":"EUR/USD","close":1.1}\n', '[warn] no fields\n']);
});
