import { parseSimulatorArgs, BrokerSimulator } from '../../src/trading/simulator';

describe('simulator CLI options', () => {
  test('flags and env', () => {
    const o = parseSimulatorArgs(['--port', '4100', '--token', 'aa', '--token=bb', '--symbols', 'EUR/USD,USD/JPY', '--always-open', '--replay', 'EUR/USD=/tmp/x.json'], {
      SIM_SEED: '9',
    });
    expect(o).toMatchObject({ port: 4100, host: '127.0.0.1', seed: 9, tokens: ['aa', 'bb'], symbols: ['EUR/USD', 'USD/JPY'], replay: { 'EUR/USD': '/tmp/x.json' } });
    expect(o.isOpen!(0)).toBe(true);
    expect(() => parseSimulatorArgs([])).toThrow(/--token/);
    expect(() => parseSimulatorArgs(['--token', 'a', '--bad-token-mode', 'x'])).toThrow(/bad-token-mode/);
    expect(parseSimulatorArgs(['--token', 'a'], { SIM_TOKENS: 'x,y', SIM_ALWAYS_OPEN: 'true', SIM_TICK_MS: '0' })).toMatchObject({ tokens: ['a'], tickIntervalMs: 0 });
    expect(parseSimulatorArgs([], { SIM_TOKENS: 'x,y', SIM_ALWAYS_OPEN: 'true' }).isOpen!(0)).toBe(true);
    expect(parseSimulatorArgs(['--token', 'a']).isOpen).toBeUndefined();
  });

  test('--volatility is a fraction (the daily standard deviation), not a whole number', () => {
    expect(parseSimulatorArgs(['--token', 'a', '--volatility', '0.0075']).volatility).toBe(0.0075);
    expect(parseSimulatorArgs(['--token', 'a'], { SIM_VOLATILITY: '0.002' }).volatility).toBe(0.002);
    expect(parseSimulatorArgs(['--token', 'a']).volatility).toBeUndefined();
  });

  test('unknown flags, positionals, missing values and bad numbers are errors that name them', () => {
    expect(() => parseSimulatorArgs(['--token', 'a', '--tick', '5'])).toThrow(/--tick/);
    expect(() => parseSimulatorArgs(['--token', 'a', 'extra'])).toThrow(/extra/);
    expect(() => parseSimulatorArgs(['--token'])).toThrow(/--token/);
    expect(() => parseSimulatorArgs(['--token', 'a', '--port', 'http'])).toThrow('--port: not a number: http');
    expect(() => parseSimulatorArgs(['--token', 'a', '--port', '80.5'])).toThrow('--port: not a whole number: 80.5');
    expect(() => parseSimulatorArgs(['--token', 'a', '--volatility', 'high'])).toThrow('--volatility: not a number: high');
    expect(() => parseSimulatorArgs(['--token', 'a', '--replay', 'nofile'])).toThrow('--replay SYMBOL=FILE expected, got nofile');
  });

  test('parsed options start a simulator (limits default when unset)', async () => {
    const sim = new BrokerSimulator();
    const { url, port } = await sim.start({ ...parseSimulatorArgs(['--token', 'aa', '--tick-ms', '0']) });
    try {
      expect(url).toBe(`http://127.0.0.1:${port}`);
      const res = await fetch(`${url}/socket.io/?access_token=aa&EIO=3&transport=polling&t=1&b64=1`);
      expect(res.status).toBe(200);
      await res.text();
    } finally {
      await sim.stop();
    }
  });
});
