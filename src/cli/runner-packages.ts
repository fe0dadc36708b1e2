/**
 * The runner's own packages (ws for the broker's stream, socket.io for the simulated broker) are
 * optional dependencies: the service's image leaves them out (`npm ci --omit=optional`). Imported
 * first by the runner's entry point, so that a missing one is said plainly before any module
 * needs it.
 */
import { createRequire } from 'node:module';

const RUNNER_PACKAGES = ['ws', 'socket.io'];

const resolve = createRequire(__filename).resolve;
const missing = RUNNER_PACKAGES.filter((name) => {
  try {
    resolve(name);
    return false;
  } catch {
    return true;
  }
});
if (missing.length > 0) {
  process.stderr.write(
    `ratelimit-runner: ${missing.join(' and ')} ${missing.length === 1 ? 'is' : 'are'} not installed: the runner's packages are optional ` +
      `dependencies, left out by \`npm ci --omit=optional\` (the service's image); install them with \`npm ci\`\n`,
  );
  process.exit(1);
}
