#!/usr/bin/env node
/**
 * `ratelimit-xds-server`: a small ADS management server that serves every `*.yaml`/`*.yml` file of
 * -config_dir as a RateLimitConfig resource (named after the file, without extension) to any node,
 * as versions "1", "2", … (after -version_prefix); a change in the directory pushes a new version to
 * every open stream, an invalid file is logged and the previous version stays. ACKs and NACKs are
 * logged, one line each. Exits 0 on SIGTERM/SIGINT. The logic is in
 * src/xds-server/management-server.ts.
 */
import fs from 'node:fs';
import { DirectoryPublisher, ManagementServer } from '../xds-server/management-server';
import { createLogger, type Logger } from '../telemetry/logger';
import { UsageError } from '../platform/argv';
import { FlagError, type FlagSpec, HelpRequested, parseFlags, usage } from './flags';
import { errorMessage } from '../platform/errors';

const PROGRAM = 'ratelimit-xds-server';

const SPECS: FlagSpec[] = [
  { name: 'config_dir', kind: 'string', help: 'directory of rate limit config YAML files to serve', default: '' },
  { name: 'host', kind: 'string', help: 'address to listen on', default: '127.0.0.1' },
  { name: 'port', kind: 'string', help: 'port to listen on (0: any free port)', default: '18000' },
  { name: 'version_prefix', kind: 'string', help: 'prefix of the served versions', default: '' },
  { name: 'merge_domain_configs', kind: 'bool', help: 'validate as clients with MERGE_DOMAIN_CONFIG=true load', default: 'false' },
  { name: 'tls_cert', kind: 'string', help: 'server certificate (PEM); serves TLS when set', default: '' },
  { name: 'tls_key', kind: 'string', help: 'server private key (PEM)', default: '' },
  { name: 'client_ca', kind: 'string', help: 'CA (PEM) that must have signed the client certificates (mTLS)', default: '' },
  { name: 'log_level', kind: 'string', help: 'log level', default: 'info' },
];

export interface XdsServerCli {
  readonly server: ManagementServer;
  readonly publisher: DirectoryPublisher;
  /** The `listening on` address, `host:port`. */
  readonly address: string;
  close(): Promise<void>;
}

export interface XdsServerIo {
  /** Where the `listening on` line goes (stdout in the program). */
  readonly out: (line: string) => void;
  readonly logger: Logger;
}

function readFile(flag: string, file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new UsageError(`-${flag}: cannot read ${file}: ${errorMessage(err)}`);
  }
}

/** Parses the flags, starts the server and the directory publisher. */
export async function runXdsServer(argv: readonly string[], io: XdsServerIo): Promise<XdsServerCli> {
  let flags;
  try {
    flags = parseFlags(argv, SPECS);
  } catch (err) {
    if (err instanceof FlagError) throw new UsageError(err.message);
    throw err;
  }
  const dir = flags['config_dir'] as string;
  if (dir === '') throw new UsageError('-config_dir is required');
  let st: fs.Stats | undefined;
  try {
    st = fs.statSync(dir);
  } catch (err) {
    throw new UsageError(`-config_dir: ${errorMessage(err)}`);
  }
  if (!st.isDirectory()) throw new UsageError(`-config_dir: ${dir} is not a directory`);
  const portText = flags['port'] as string;
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new UsageError(`-port: invalid port ${JSON.stringify(portText)}`);
  const certFile = flags['tls_cert'] as string;
  const keyFile = flags['tls_key'] as string;
  const caFile = flags['client_ca'] as string;
  if ((certFile === '') !== (keyFile === '')) throw new UsageError('-tls_cert and -tls_key must be given together');
  if (caFile !== '' && certFile === '') throw new UsageError('-client_ca needs -tls_cert and -tls_key');
  const tls =
    certFile === ''
      ? undefined
      : {
          cert: readFile('tls_cert', certFile),
          key: readFile('tls_key', keyFile),
          clientCa: caFile === '' ? undefined : readFile('client_ca', caFile),
        };

  const { logger } = io;
  const server = new ManagementServer({ host: flags['host'] as string, port, tls, logger });
  const publisher = new DirectoryPublisher({
    dir,
    server,
    logger,
    versionPrefix: flags['version_prefix'] as string,
    mergeDomainConfigs: flags['merge_domain_configs'] as boolean,
  });
  publisher.start();
  try {
    await server.start();
  } catch (err) {
    publisher.stop();
    throw new UsageError(`cannot listen on ${server.address}: ${errorMessage(err)}`);
  }
  const address = server.address;
  logger.info(`serving ${tls === undefined ? 'plaintext' : tls.clientCa === undefined ? 'TLS' : 'mTLS (client certificates required)'} on ${address}`);
  io.out(`${PROGRAM} listening on ${address}`);
  return {
    server,
    publisher,
    address,
    close: async () => {
      publisher.stop();
      await server.stop();
    },
  };
}

async function main(argv: string[]): Promise<void> {
  const logLevelIndex = argv.findIndex((a) => /^--?log_level(=|$)/.test(a));
  let level = 'info';
  if (logLevelIndex >= 0) {
    const a = argv[logLevelIndex]!;
    level = a.includes('=') ? a.slice(a.indexOf('=') + 1) : (argv[logLevelIndex + 1] ?? 'info');
  }
  const logger = createLogger({ level, format: 'text' });
  // The signals are taken before the server starts: one that comes while it starts (or right
  // after its `listening on` line, before this function resumes) would otherwise kill it.
  let cli: XdsServerCli | undefined;
  let stopping = false;
  const stop = (): void => {
    cli?.close().then(
      () => process.exit(0),
      () => process.exit(0),
    );
  };
  for (const sig of ['SIGTERM', 'SIGINT'] as const) {
    process.once(sig, () => {
      if (stopping) return;
      stopping = true;
      logger.info(`received ${sig}, stopping`);
      stop(); // still starting: stopped once started, below
    });
  }
  try {
    cli = await runXdsServer(argv, { out: (l) => process.stdout.write(l + '\n'), logger });
  } catch (err) {
    if (err instanceof HelpRequested) {
      process.stdout.write(usage(PROGRAM, SPECS));
      process.exit(0);
    }
    if (err instanceof UsageError) {
      process.stderr.write(`${PROGRAM}: ${err.message}\n${usage(PROGRAM, SPECS)}`);
      process.exit(2);
    }
    throw err;
  }
  if (stopping) stop();
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`${PROGRAM}: fatal: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  });
}
