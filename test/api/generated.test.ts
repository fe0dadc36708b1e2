/**
 * generated/ is checked in: it must be exactly what api/generate.sh produces from api/*.proto,
 * and the generated code must speak the public wire protocol (field numbers, presence).
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { RateLimitDescriptor } from '../../generated/envoy/extensions/common/ratelimit/v3/ratelimit';
import {
  RateLimitRequest,
  RateLimitResponse,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  RateLimitServiceService,
} from '../../generated/envoy/service/ratelimit/v3/rls';
import { RateLimitUnit as EnvoyTypeRateLimitUnit } from '../../generated/envoy/type/v3/ratelimit_unit';
import { RateLimitConfig, RateLimitUnit } from '../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import { AggregatedDiscoveryServiceService } from '../../generated/envoy/service/discovery/v3/ads';
import { DiscoveryRequest, DiscoveryResponse } from '../../generated/envoy/service/discovery/v3/discovery';
import { HealthCheckResponse_ServingStatus, HealthService } from '../../generated/grpc/health/v1/health';

const ROOT = path.resolve(__dirname, '..', '..');

function listFiles(dir: string, base = dir): string[] {
  if (!fs.existsSync(dir)) return [];
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) out.push(...listFiles(full, base));
    else out.push(path.relative(base, full).split(path.sep).join('/'));
  }
  return out.sort();
}

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

describe('generated/ is up to date with api/*.proto', () => {
  let tmp: string;

  beforeAll(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'rl-proto-gen-'));
    execFileSync('bash', [path.join(ROOT, 'api', 'generate.sh'), tmp], {
      cwd: os.tmpdir(), // the script must work from any directory
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }, 60000);

  afterAll(() => {
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  test('every file matches (run `make proto` to refresh)', () => {
    const committedDir = path.join(ROOT, 'generated');
    const freshDir = path.join(tmp, 'generated');
    const committed = listFiles(committedDir);
    const fresh = listFiles(freshDir);
    expect(fresh.length).toBeGreaterThan(0);

    const freshSet = new Set(fresh);
    const committedSet = new Set(committed);
    const problems: string[] = [];
    for (const f of fresh) {
      if (!committedSet.has(f)) problems.push(`missing from generated/: ${f}`);
      else if (!fs.readFileSync(path.join(committedDir, f)).equals(fs.readFileSync(path.join(freshDir, f)))) {
        problems.push(`stale: generated/${f}`);
      }
    }
    for (const f of committed) {
      if (!freshSet.has(f)) problems.push(`not produced by api/generate.sh (delete it): generated/${f}`);
    }
    expect(problems).toEqual([]);
  });
});

describe('wire format of the generated messages', () => {
  test('descriptor hits_addend is field 3 and an explicit 0 survives as present', () => {
    const req: RateLimitRequest = {
      domain: 'd',
      descriptors: [
        { entries: [{ key: 'k', value: 'v' }], limit: undefined, hitsAddend: 0n },
        { entries: [{ key: 'k', value: '' }], limit: undefined, hitsAddend: undefined },
        { entries: [{ key: 'k', value: 'v' }], limit: undefined, hitsAddend: 5n },
      ],
      hitsAddend: 0,
    };
    const bytes = RateLimitRequest.encode(req).finish();

    const entryKv = '0a016b120176'; // Entry{key=1:"k", value=2:"v"}
    const expected =
      '0a0164' + // domain = 1: "d"
      '12' + '0a' + '0a06' + entryKv + '1a00' + // descriptors = 2; hits_addend = 3: UInt64Value{} (0, present)
      '12' + '05' + '0a03' + '0a016b' + // entries only, value "" omitted, no hits_addend
      '12' + '0c' + '0a06' + entryKv + '1a020805'; // hits_addend = 3: UInt64Value{value = 1: 5}
    // the request-level hits_addend (field 3, uint32) is 0 and therefore not on the wire
    expect(hex(bytes)).toBe(expected);

    const back = RateLimitRequest.decode(bytes);
    expect(back.domain).toBe('d');
    expect(back.hitsAddend).toBe(0);
    expect(back.descriptors).toHaveLength(3);
    expect(back.descriptors[0].hitsAddend).toBe(0n);
    expect(back.descriptors[0].hitsAddend).not.toBeUndefined();
    expect(back.descriptors[1].hitsAddend).toBeUndefined();
    expect(back.descriptors[1].entries).toEqual([{ key: 'k', value: '' }]);
    expect(back.descriptors[2].hitsAddend).toBe(5n);

    // request-level hits_addend is field 3 (varint) of RateLimitRequest
    expect(hex(RateLimitRequest.encode({ domain: '', descriptors: [], hitsAddend: 7 }).finish())).toBe('1807');
    // and the descriptor's limit override is field 2 (requests_per_unit = 1, unit = 2)
    const override = RateLimitDescriptor.decode(Buffer.from('1204080a1001', 'hex'));
    expect(override.limit).toEqual({ requestsPerUnit: 10, unit: EnvoyTypeRateLimitUnit.SECOND });
    expect(override.hitsAddend).toBeUndefined();
  });

  test('WEEK (7) is representable in RateLimitResponse and round-trips', () => {
    expect(RateLimitResponse_RateLimit_Unit.WEEK).toBe(7);
    expect(RateLimitUnit.WEEK).toBe(7); // xDS config enum
    expect('WEEK' in EnvoyTypeRateLimitUnit).toBe(false); // envoy.type.v3.RateLimitUnit has no WEEK upstream

    const resp = RateLimitResponse.fromPartial({
      overallCode: RateLimitResponse_Code.OVER_LIMIT,
      statuses: [
        {
          code: RateLimitResponse_Code.OVER_LIMIT,
          currentLimit: { name: 'n', requestsPerUnit: 3, unit: RateLimitResponse_RateLimit_Unit.WEEK },
          limitRemaining: 0,
          durationUntilReset: { seconds: 60n, nanos: 0 },
        },
      ],
      responseHeadersToAdd: [{ key: 'x', value: 'y' }],
      dynamicMetadata: { a: 1 },
    });
    const bytes = RateLimitResponse.encode(resp).finish();
    const h = hex(bytes);
    expect(h.startsWith('0802')).toBe(true); // overall_code = 1: OVER_LIMIT
    // DescriptorStatus{code=1: 2, current_limit=2: RateLimit{name=3: "n", requests_per_unit=1: 3, unit=2: 7},
    //                  duration_until_reset=4: Duration{seconds=1: 60}}
    // (ts-proto writes fields in declaration order, so RateLimit.name comes first)
    expect(h).toContain('12' + '0f' + '0802' + '1207' + '1a016e' + '0803' + '1007' + '2202083c');
    expect(h).toContain('1a06' + '0a0178' + '120179'); // response_headers_to_add = 3: HeaderValue{key=1, value=2}

    const back = RateLimitResponse.decode(bytes);
    expect(back.statuses[0].currentLimit?.unit).toBe(RateLimitResponse_RateLimit_Unit.WEEK);
    expect(back.statuses[0].durationUntilReset?.seconds).toBe(60n);
    expect(back.dynamicMetadata).toEqual({ a: 1 });
    expect(back.responseHeadersToAdd).toEqual([{ key: 'x', value: 'y', rawValue: Buffer.alloc(0) }]);
  });

  test('xDS messages use the public field numbers', () => {
    const req = DiscoveryRequest.fromPartial({
      versionInfo: '1',
      node: { id: 'n' },
      typeUrl: 't',
      responseNonce: 'x',
      errorDetail: { code: 0, message: 'm' },
    });
    // version_info=1, node=2{id=1}, type_url=4, response_nonce=5, error_detail=6{message=2}
    expect(hex(DiscoveryRequest.encode(req).finish())).toBe('0a0131' + '1203' + '0a016e' + '220174' + '2a0178' + '3203' + '12016d');

    const cfg = RateLimitConfig.encode(
      RateLimitConfig.fromPartial({
        name: 'c',
        domain: 'd',
        descriptors: [{ key: 'k', rateLimit: { unit: RateLimitUnit.WEEK, requestsPerUnit: 1 }, quotaMode: true }],
      }),
    ).finish();
    // name=1, domain=2, descriptors=3{key=1, rate_limit=3{unit=1: 7, requests_per_unit=2: 1}, quota_mode=7: true}
    expect(hex(cfg)).toBe('0a0163' + '120164' + '1a0b' + '0a016b' + '1a04' + '08071001' + '3801');

    const resp = DiscoveryResponse.decode(
      DiscoveryResponse.encode(
        DiscoveryResponse.fromPartial({
          versionInfo: '2',
          nonce: 'z',
          typeUrl: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig',
          resources: [
            // bytes fields are Buffer (env=node); encode().finish() gives a Uint8Array
            { typeUrl: 'type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig', value: Buffer.from(cfg) },
          ],
        }),
      ).finish(),
    );
    expect(RateLimitConfig.decode(resp.resources[0].value).descriptors[0].rateLimit?.unit).toBe(RateLimitUnit.WEEK);
  });

  test('gRPC method paths', () => {
    expect(RateLimitServiceService.shouldRateLimit.path).toBe('/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit');
    expect(HealthService.check.path).toBe('/grpc.health.v1.Health/Check');
    expect(HealthService.watch.responseStream).toBe(true);
    expect(HealthService.list.path).toBe('/grpc.health.v1.Health/List');
    expect(HealthCheckResponse_ServingStatus.SERVICE_UNKNOWN).toBe(3);
    const ads = AggregatedDiscoveryServiceService.streamAggregatedResources;
    expect(ads.path).toBe('/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources');
    expect(ads.requestStream && ads.responseStream).toBe(true);
  });
});
