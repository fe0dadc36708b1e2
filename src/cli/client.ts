#!/usr/bin/env node
/**
 * `ratelimit-client`: sends one ShouldRateLimit request over gRPC and prints the response as
 * proto3 JSON. Flags as upstream's client: -dial_string, -domain, repeatable -descriptors k=v,k2=v2.
 */
import * as grpc from '@grpc/grpc-js';
import { RateLimitServiceClient } from '../../generated/envoy/service/ratelimit/v3/rls';
import type { RateLimitRequest } from '../core/rls';
import { serializeRateLimitResponse } from '../server/json-codec';
import { fromProtoResponse, toProtoRequest } from '../client/proto-convert';
import fs from 'node:fs';
import { parseDescriptor } from '../limiter/descriptor-text';
import { diagnoseTls, speaksTls, type TlsFiles } from '../client/tls-diagnosis';
import { type FlagSpec, FlagError, type ParsedFlags, parseFlagsOrExit } from './flags';
import { errorMessage } from '../platform/errors';

const SPECS: FlagSpec[] = [
  { name: 'dial_string', kind: 'string', help: 'url of ratelimit server in <host>:<port> form', default: 'localhost:8081' },
  { name: 'domain', kind: 'string', help: 'rate limit configuration domain to query', default: '' },
  {
    name: 'descriptors',
    kind: 'list',
    help: 'descriptor list to query in <key>=<value>,<key>=<value>,... form (repeatable)',
  },
  { name: 'hits_addend', kind: 'string', help: 'hits to add (request hits_addend)', default: '1' },
  { name: 'timeout', kind: 'string', help: 'deadline of the call in milliseconds', default: '5000' },
  { name: 'grpc-use-tls', kind: 'bool', help: 'use TLS for the connection to the server', default: 'false' },
  { name: 'grpc-server-ca-file', kind: 'string', help: 'CA file that verifies the server certificate (default: the system CAs)', default: '' },
  { name: 'grpc-cert-file', kind: 'string', help: 'client certificate file, for mTLS', default: '' },
  { name: 'grpc-key-file', kind: 'string', help: 'client private key file, for mTLS', default: '' },
  { name: 'grpc-server-name', kind: 'string', help: 'server name to verify in its certificate (default: the dial host)', default: '' },
];

/**
 * Channel credentials from the TLS flags (upstream's flag names), plaintext without -grpc-use-tls;
 * `files`, the TLS files read, to explain a failed connection.
 */
export function clientCredentials(flags: ParsedFlags): { credentials: grpc.ChannelCredentials; options: grpc.ClientOptions; files?: TlsFiles } {
  if (flags['grpc-use-tls'] !== true) return { credentials: grpc.credentials.createInsecure(), options: {} };
  const read = (flag: string): Buffer | null => {
    const file = flags[flag] as string;
    if (file === '') return null;
    try {
      return fs.readFileSync(file);
    } catch (err) {
      throw new FlagError(`-${flag}: cannot read ${file}: ${errorMessage(err)}`);
    }
  };
  const cert = read('grpc-cert-file');
  const key = read('grpc-key-file');
  if ((cert === null) !== (key === null)) throw new FlagError('-grpc-cert-file and -grpc-key-file go together');
  const serverName = flags['grpc-server-name'] as string;
  const ca = read('grpc-server-ca-file');
  return {
    credentials: grpc.credentials.createSsl(ca, key, cert),
    options: serverName === '' ? {} : { 'grpc.ssl_target_name_override': serverName, 'grpc.default_authority': serverName },
    files: { ca: ca ?? undefined, cert: cert ?? undefined, key: key ?? undefined, serverName },
  };
}

/**
 * A failed call as one complete line: the status name and grpc-js's details (OpenSSL's lines
 * joined), without the `Resolution note:` it appends even when it has no note; or, when TLS is
 * what failed (`tlsProblem`, from diagnoseTls), that. The "listening?" hint only when the
 * connection was refused: a server that refused the certificate was listening.
 */
export function describeCallError(err: grpc.ServiceError, dial: string, tlsProblem?: string): string {
  const name = grpc.status[err.code] ?? `code ${err.code}`;
  if (tlsProblem !== undefined) return `${name}: TLS with ${dial} failed: ${tlsProblem}`;
  const details = err.details
    .replace(/\.?\s*Resolution note:\s*$/, '')
    .replace(/\s*\n\s*/g, ' ')
    .trim();
  const hint = err.code === grpc.status.UNAVAILABLE && details.includes('ECONNREFUSED') ? ` (is the rate limit service listening on ${dial}?)` : '';
  return `${name}: ${details}${hint}`;
}

function main(argv: string[]): void {
  const flags = parseFlagsOrExit('ratelimit-client', argv, SPECS);
  const hits = Number(flags['hits_addend']);
  const timeout = Number(flags['timeout']);
  if (!Number.isInteger(hits) || hits < 0 || hits > 4294967295) {
    process.stderr.write(`invalid -hits_addend "${String(flags['hits_addend'])}": expected an integer 0..4294967295\n`);
    process.exit(2);
  }
  if (!Number.isFinite(timeout) || timeout <= 0) {
    process.stderr.write(`invalid -timeout "${String(flags['timeout'])}": expected milliseconds > 0\n`);
    process.exit(2);
  }
  let request: RateLimitRequest;
  try {
    request = {
      domain: flags['domain'] as string,
      descriptors: (flags['descriptors'] as string[]).map(parseDescriptor),
      hitsAddend: hits,
    };
  } catch (err) {
    process.stderr.write(`${errorMessage(err)}\n`);
    process.exit(2);
  }
  const dial = flags['dial_string'] as string;
  process.stdout.write(`domain: ${request.domain}\n`);
  for (const d of request.descriptors) {
    process.stdout.write(`descriptor: ${d.entries.map((e) => `${e.key}=${e.value}`).join(',')}\n`);
  }
  let tls;
  try {
    tls = clientCredentials(flags);
  } catch (err) {
    process.stderr.write(`${errorMessage(err)}\n`);
    process.exit(2);
  }
  const client = new RateLimitServiceClient(dial, tls.credentials, tls.options);
  client.shouldRateLimit(
    toProtoRequest(request),
    new grpc.Metadata(),
    { deadline: Date.now() + timeout },
    async (err, res) => {
      client.close();
      if (err) {
        const files = tls.files;
        let tlsProblem: string | undefined;
        if (err.code === grpc.status.UNAVAILABLE) {
          if (files !== undefined) tlsProblem = await diagnoseTls(dial, files, timeout);
          else if (await speaksTls(dial, timeout)) tlsProblem = 'the service speaks TLS (GRPC_SERVER_USE_TLS) and this call did not: add -grpc-use-tls and -grpc-server-ca-file (and -grpc-cert-file, -grpc-key-file for mTLS)';
        }
        process.stderr.write(`request error: ${describeCallError(err, dial, tlsProblem)}\n`);
        process.exit(1);
      }
      const json = JSON.parse(serializeRateLimitResponse(fromProtoResponse(res)));
      process.stdout.write(`response: ${JSON.stringify(json, null, 2)}\n`);
    },
  );
}

if (require.main === module) main(process.argv.slice(2));
