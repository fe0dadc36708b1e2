/**
 * Loading a strategy module.
 *
 * - `.js` / `.cjs`: a CommonJS module, loaded with `require`. It exports the strategy as
 *   `module.exports = strategy`, `exports.default` or `exports.strategy`.
 * - `.ts` / `.cts`: transpiled in memory with the `typescript` package when it is installed
 *   (a devDependency of this repository, not a runtime dependency of the package): types are
 *   erased, no type check (run `tsc --noEmit` for that). Without `typescript`, compile the strategy
 *   to JavaScript first (`npx tsc strategy.ts --module commonjs --target es2022`) and pass the .js.
 *   Line numbers in errors refer to the transpiled code, which keeps the source lines for
 *   type-only syntax.
 * - ES modules (`.mjs`) are not supported: use CommonJS.
 */
import fs from 'node:fs';
import Module from 'node:module';
import path from 'node:path';
import { StrategyError, scriptLocation } from '../errors';
import { checkProtectionRules } from '../protections/protections';
import type { Strategy } from '../strategy';
import { errorMessage } from '../../../platform/errors';

function pickStrategy(mod: unknown): unknown {
  if (mod && typeof mod === 'object') {
    const m = mod as Record<string, unknown>;
    if (m.default && typeof m.default === 'object') return m.default;
    if (m.strategy && typeof m.strategy === 'object') return m.strategy;
  }
  return mod;
}

export function validateStrategy(s: unknown, file: string): Strategy<Record<string, unknown>> {
  if (!s || typeof s !== 'object') throw new StrategyError(`${file} does not export a strategy object`, 'load', undefined);
  const st = s as Record<string, unknown>;
  if (!Array.isArray(st.symbols) || st.symbols.length === 0 || !st.symbols.every((x) => typeof x === 'string')) {
    throw new StrategyError(`${file}: the strategy must have a non-empty "symbols" array`, 'load', undefined);
  }
  for (const h of ['onStart', 'onTick', 'onBar', 'onOrder', 'onTrade', 'onTimer', 'onReconnect', 'onStop', 'saveState', 'restoreState']) {
    if (st[h] !== undefined && typeof st[h] !== 'function') throw new StrategyError(`${file}: ${h} must be a function`, 'load', undefined);
  }
  // one without the other would save a state nothing restores, or restore one never saved
  if ((st.saveState === undefined) !== (st.restoreState === undefined)) {
    throw new StrategyError(`${file}: the strategy has ${st.saveState ? 'saveState but no restoreState' : 'restoreState but no saveState'}: define both, or neither`, 'load', undefined);
  }
  try {
    checkProtectionRules(st.protections, file);
  } catch (e) {
    throw new StrategyError(errorMessage(e), 'load', undefined);
  }
  return s as Strategy<Record<string, unknown>>;
}

/**
 * Transpiled sources by path, with the file's size and modification time: a sweep loads the same
 * file afresh for every run (about 11 ms of transpiling each), and an edited file is transpiled again.
 */
const transpiled = new Map<string, { stamp: string; code: string }>();

/**
 * Whether this process's own `require` loads TypeScript: a module registry of its own (jest's,
 * which transforms what it loads, lists none of node's extensions) or a registered `.ts` loader
 * (ts-node). A .ts strategy is then required like a .js one, in that registry; else it is
 * transpiled here.
 */
function hostLoadsTypeScript(): boolean {
  const extensions = require.extensions as Record<string, unknown> | undefined;
  return extensions === undefined || !('.js' in extensions) || '.ts' in extensions;
}

function loadTs(abs: string): unknown {
  const stat = fs.statSync(abs);
  const stamp = `${stat.size}:${stat.mtimeMs}`;
  let code = transpiled.get(abs)?.stamp === stamp ? transpiled.get(abs)!.code : undefined;
  if (code === undefined) {
    code = transpileTs(abs);
    transpiled.set(abs, { stamp, code });
  }
  const m = new Module(abs, module);
  m.filename = abs;
  m.paths = (Module as unknown as { _nodeModulePaths(p: string): string[] })._nodeModulePaths(path.dirname(abs));
  (m as unknown as { _compile(code: string, file: string): void })._compile(code, abs);
  return m.exports;
}

function transpileTs(abs: string): string {
  let ts: typeof import('typescript');
  try {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    ts = require('typescript') as typeof import('typescript');
  } catch {
    throw new StrategyError(
      `${abs}: loading a TypeScript strategy needs the "typescript" package; compile it to JavaScript (tsc --module commonjs) and pass the .js file`,
      'load',
      undefined,
    );
  }
  const src = fs.readFileSync(abs, 'utf8');
  return ts.transpileModule(src, {
    fileName: abs,
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
  }).outputText;
}

/** Loads and validates a strategy file; load errors become StrategyError with the script line. */
export function loadStrategy(file: string): Strategy<Record<string, unknown>> {
  const abs = path.resolve(file);
  if (!fs.existsSync(abs)) throw new StrategyError(`strategy file not found: ${abs}`, 'load', undefined);
  let mod: unknown;
  try {
    if (/\.(c?ts)$/.test(abs) && !hostLoadsTypeScript()) mod = loadTs(abs);
    else if (/\.mjs$/.test(abs)) throw new StrategyError(`${abs}: ES modules are not supported; use a CommonJS .js/.cjs (or .ts) file`, 'load', undefined);
    else {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      mod = require(abs);
    }
  } catch (e) {
    if (e instanceof StrategyError) throw e;
    throw new StrategyError(`failed to load ${abs}: ${errorMessage(e)}`, 'load', scriptLocation(e, abs), e);
  }
  return validateStrategy(pickStrategy(mod), abs);
}
