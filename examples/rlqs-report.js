#!/usr/bin/env node
// Talks RLQS to a running `ratelimit` the way Envoy's rate_limit_quota filter does, without Envoy:
// opens one StreamRateLimitQuotas stream, reports the usage of each bucket, and prints what the
// service assigns. See docs/rlqs.md.
//
//   node examples/rlqs-report.js --domain example --bucket remote_address=192.0.2.7
//
// The first report of a bucket is what Envoy sends on the bucket's first request: time_elapsed 0
// and that one request allowed. With --reports N > 1, one more report follows every --every
// seconds (Envoy: 5) with --rate requests a second allowed. Needs a build (`make build`): it uses
// the generated code under dist/generated, as ratelimit-client does.
'use strict';
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const { RateLimitQuotaServiceClient } = require('../dist/generated/envoy/service/rate_limit_quota/v3/rlqs');

const USAGE = `Usage: node examples/rlqs-report.js --domain D --bucket k=v[,k2=v2] [--bucket ...] [options]
  --target HOST:PORT  the service's gRPC address (default localhost:8081)
  --domain D          the RLQS domain: a domain of the rate limit config
  --bucket k=v,...    a bucket's pairs (BucketId); repeatable
  --reports N         reports to send per bucket (default 1)
  --every S           seconds between reports (default 5, Envoy's cadence)
  --rate R            requests a second each later report says were allowed (default 1)
`;

function fail(message) {
  process.stderr.write(`${message}\n${USAGE}`);
  process.exit(2);
}

let args;
try {
  args = parseArgs({
    options: {
      target: { type: 'string', default: 'localhost:8081' },
      domain: { type: 'string' },
      bucket: { type: 'string', multiple: true },
      reports: { type: 'string', default: '1' },
      every: { type: 'string', default: '5' },
      rate: { type: 'string', default: '1' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  }).values;
} catch (err) {
  fail(err.message);
}
if (args.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}
if (!args.domain) fail('--domain is required');
if (!args.bucket || args.bucket.length === 0) fail('--bucket is required');
const reports = Number(args.reports);
const every = Number(args.every);
const rate = Number(args.rate);
if (!Number.isInteger(reports) || reports < 1) fail(`--reports ${args.reports}: expected an integer >= 1`);
if (!Number.isInteger(every) || every < 1) fail(`--every ${args.every}: expected whole seconds >= 1`);
if (!Number.isInteger(rate) || rate < 0) fail(`--rate ${args.rate}: expected an integer >= 0`);

/** `k=v,k2=v2` → { k: 'v', k2: 'v2' } */
function parseBucket(text) {
  const bucket = {};
  for (const pair of text.split(',')) {
    const eq = pair.indexOf('=');
    if (eq <= 0) fail(`--bucket ${text}: expected k=v[,k2=v2]`);
    bucket[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  return bucket;
}
const buckets = args.bucket.map(parseBucket);

const pairsText = (bucket) =>
  Object.entries(bucket ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
const seconds = (d) => (d === undefined ? undefined : Number(d.seconds) + d.nanos / 1e9);

/** One bucket action as a line: the assignment, or the abandon. */
function describe(action) {
  const name = pairsText(action.bucketId?.bucket);
  if (action.abandonAction !== undefined) return `${name}: abandoned (the service stopped assigning it)`;
  const a = action.quotaAssignmentAction;
  const ttl = seconds(a.assignmentTimeToLive);
  const s = a.rateLimitStrategy;
  let what;
  if (s === undefined) what = 'allow all';
  else if (s.blanketRule !== undefined) what = s.blanketRule === 1 ? 'deny all' : 'allow all';
  else if (s.tokenBucket !== undefined) {
    const tb = s.tokenBucket;
    what = `token bucket (max ${tb.maxTokens}, ${tb.tokensPerFill ?? 1} tokens every ${seconds(tb.fillInterval)} s)`;
  } else what = 'requests per time unit';
  return `${name}: ${what}, for ${ttl === undefined ? 'ever' : `${ttl} s`}`;
}

const client = new RateLimitQuotaServiceClient(args.target, grpc.credentials.createInsecure());
const call = client.streamRateLimitQuotas();
let sent = 0;
let timer;

function report(elapsedSeconds, allowed) {
  sent++;
  call.write({
    domain: args.domain,
    bucketQuotaUsages: buckets.map((bucket) => ({
      bucketId: { bucket },
      timeElapsed: { seconds: BigInt(elapsedSeconds), nanos: 0 },
      numRequestsAllowed: BigInt(allowed),
      numRequestsDenied: 0n,
    })),
  });
  process.stdout.write(`report ${sent}: ${buckets.map(pairsText).join(' ')} (time_elapsed ${elapsedSeconds} s, allowed ${allowed})\n`);
  if (sent < reports) {
    timer = setTimeout(() => report(every, rate * every), every * 1000);
  } else {
    // The service answers a report only when an assignment changes (or its time to live would
    // run out before the next report): after the last report, wait for one answer or one
    // interval, then end.
    timer = setTimeout(finish, every * 1000);
  }
}

function finish() {
  clearTimeout(timer);
  call.end();
}

call.on('data', (response) => {
  for (const action of response.bucketAction) process.stdout.write(`assigned: ${describe(action)}\n`);
  if (sent >= reports) finish();
});
call.on('error', (err) => {
  clearTimeout(timer);
  client.close();
  process.stderr.write(`stream failed: ${grpc.status[err.code] ?? err.code}: ${err.details}\n`);
  process.exitCode = 1;
});
call.on('end', () => client.close());

process.stdout.write(`RLQS stream to ${args.target}, domain ${args.domain}\n`);
report(0, 1);
