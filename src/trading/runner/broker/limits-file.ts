/**
 * Where the runner's bundled broker limits live (examples/runner/broker-limits.yaml), found from
 * src/ (ts-node, jest) and from dist/ alike.
 */
import fs from 'node:fs';
import path from 'node:path';

/** The bundled limits file's path; throws when the package ships without it. */
export function bundledLimitsFile(): string {
  for (const up of ['../../../..', '../../../../..']) {
    const f = path.resolve(__dirname, up, 'examples/runner/broker-limits.yaml');
    if (fs.existsSync(f)) return f;
  }
  throw new Error('the bundled examples/runner/broker-limits.yaml was not found; pass --limits FILE');
}
