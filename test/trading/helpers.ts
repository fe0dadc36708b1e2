import { FxcmClient, type FxcmClientOptions } from '../../src/trading/fxcm';
import { BrokerSimulator, type SimulatorStartOptions } from '../../src/trading/simulator';

export const TOKEN = 'a1b2c3d4e5f60718293a4b5c6d7e8f9012345678';
export const TOKEN2 = 'ffffeeeeddddccccbbbbaaaa9999888877776666';

export async function startSim(extra: Partial<SimulatorStartOptions> = {}): Promise<BrokerSimulator> {
  const sim = new BrokerSimulator();
  await sim.start({ port: 0, host: '127.0.0.1', seed: 7, tokens: [TOKEN, TOKEN2], isOpen: () => true, pingIntervalMs: 300, pingTimeoutMs: 2000, ...extra });
  return sim;
}

export function newClient(sim: Pick<BrokerSimulator, 'url'>, extra: Partial<FxcmClientOptions> = {}): FxcmClient {
  return new FxcmClient({
    baseUrl: sim.url,
    token: TOKEN,
    engineIO: 3,
    timeouts: { connectMs: 5000, requestMs: 5000, tradeIdsMs: 5000 },
    backoff: { initialMs: 50, maxMs: 200, jitter: 0 },
    ...extra,
  });
}

export function once<T extends unknown[]>(em: { once(ev: string, fn: (...a: T) => void): unknown }, ev: string, ms = 5000): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`timed out waiting for ${ev}`)), ms);
    em.once(ev, (...a: T) => {
      clearTimeout(t);
      resolve(a);
    });
  });
}
