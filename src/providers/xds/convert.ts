/**
 * RateLimitConfig (xDS resource, `ratelimit.config.ratelimit.v3`) ⇄ the YAML config shape.
 *
 * Proto → YAML object (client side, upstream `config.ConfigXdsProtoToYaml`): the result is a plain
 * object with the YAML field names that `loadConfigFromObjects` validates exactly like a YAML file,
 * so every error text is the YAML one, prefixed with `RateLimitConfig.name`:
 * - `unit` is the enum *name* (upstream's `unit.String()`): `UNKNOWN` (unset) is therefore only
 *   valid together with `unlimited` (`invalid rate limit unit 'UNKNOWN'` otherwise); a number
 *   outside the enum becomes its decimal text, as Go prints it (`invalid rate limit unit '99'`).
 * - false booleans, an empty `value`, empty descriptor lists and empty `replaces` are left out (they
 *   decode to the same defaults); `key`, `domain` and every `replaces[].name` are always present, so
 *   empty ones fail with the YAML errors. `metadata` (a Struct) is passed through as a plain object.
 *
 * YAML file → proto (management server side): the file is validated with the service's own loader
 * first (same errors, named after the file), then decoded with the same YAML reader and turned into
 * a RateLimitConfig. Upstream's proto has no field for `value_to_metric`, `share_threshold`,
 * `rate_limits`, `algorithm` or `burst`: they travel as this project's extension fields (100+),
 * which another control plane (or an upstream service) leaves out.
 */
import {
  RateLimitConfig as RateLimitConfigProto,
  type RateLimitDescriptor as RateLimitDescriptorProto,
  type RateLimitPolicy as RateLimitPolicyProto,
  RateLimitUnit,
} from '../../../generated/ratelimit/config/ratelimit/v3/rls_conf';
import type { ConfigObject } from '../../config/load';
import { ConfigError } from '../../config/types';
import { convertMetadata, loadConfig } from '../../config/load';
import type { YamlDescriptor, YamlRateLimit } from '../../config/schema';
import { decodeRoot } from '../../config/schema';
import { parseYaml } from '../../config/tree';
import { StatsStore } from '../../stats/store';

/** The fully qualified message name (what a type URL ends with). */
export const RATE_LIMIT_CONFIG_MESSAGE = 'ratelimit.config.ratelimit.v3.RateLimitConfig';
/** The type URL of the resources, requests and responses. */
export const RATE_LIMIT_CONFIG_TYPE_URL = `type.googleapis.com/${RATE_LIMIT_CONFIG_MESSAGE}`;

/** Enum names by number, as Go's generated `String()`. */
const UNIT_NAMES: ReadonlyMap<number, string> = new Map([
  [RateLimitUnit.UNKNOWN, 'UNKNOWN'],
  [RateLimitUnit.SECOND, 'SECOND'],
  [RateLimitUnit.MINUTE, 'MINUTE'],
  [RateLimitUnit.HOUR, 'HOUR'],
  [RateLimitUnit.DAY, 'DAY'],
  [RateLimitUnit.WEEK, 'WEEK'],
  [RateLimitUnit.MONTH, 'MONTH'],
  [RateLimitUnit.YEAR, 'YEAR'],
]);

/** Enum numbers by upper-cased name (the YAML unit is case-insensitive). */
const UNIT_NUMBERS: ReadonlyMap<string, RateLimitUnit> = new Map([...UNIT_NAMES].map(([n, s]) => [s, n]));

/** Go's `RateLimitUnit.String()`: the name, or the number in decimal when it is not in the enum. */
export function unitName(unit: number): string {
  return UNIT_NAMES.get(unit) ?? String(unit);
}

/** The enum number for a YAML unit name (case-insensitive); UNKNOWN for anything else. */
export function unitFromName(name: string): RateLimitUnit {
  return UNIT_NUMBERS.get(name.toUpperCase()) ?? RateLimitUnit.UNKNOWN;
}

// ---------------------------------------------------------------------------------------------
// Proto → YAML-shaped object

/** One RateLimitConfig resource as a document for `loadConfigFromObjects` (name = resource name). */
export function rateLimitConfigToObject(config: RateLimitConfigProto): ConfigObject {
  return {
    name: config.name,
    root: { domain: config.domain, descriptors: config.descriptors.map(descriptorToObject) },
  };
}

function descriptorToObject(d: RateLimitDescriptorProto): Record<string, unknown> {
  const out: Record<string, unknown> = { key: d.key };
  if (d.value !== '') out['value'] = d.value;
  if (d.rateLimit !== undefined) out['rate_limit'] = policyToObject(d.rateLimit);
  if (d.rateLimits.length > 0) out['rate_limits'] = d.rateLimits.map(policyToObject);
  if (d.descriptors.length > 0) out['descriptors'] = d.descriptors.map(descriptorToObject);
  if (d.shadowMode) out['shadow_mode'] = true;
  if (d.quotaMode) out['quota_mode'] = true;
  if (d.detailedMetric) out['detailed_metric'] = true;
  if (d.valueToMetric) out['value_to_metric'] = true;
  if (d.shareThreshold) out['share_threshold'] = true;
  if (d.metadata !== undefined) out['metadata'] = d.metadata;
  return out;
}

function policyToObject(p: RateLimitPolicyProto): Record<string, unknown> {
  const out: Record<string, unknown> = { unit: unitName(p.unit), requests_per_unit: p.requestsPerUnit };
  if (p.unlimited) out['unlimited'] = true;
  if (p.name !== '') out['name'] = p.name;
  if (p.replaces.length > 0) out['replaces'] = p.replaces.map((r) => ({ name: r.name }));
  if (p.algorithm !== '') out['algorithm'] = p.algorithm;
  if (p.burst !== 0) out['burst'] = p.burst;
  return out;
}

function policyToProto(rl: YamlRateLimit): RateLimitPolicyProto {
  return {
    unit: unitFromName(rl.unit),
    requestsPerUnit: rl.requestsPerUnit,
    unlimited: rl.unlimited,
    name: rl.name,
    replaces: rl.replaces.map((r) => ({ name: r.name })),
    algorithm: rl.algorithm,
    burst: rl.burst,
  };
}

// ---------------------------------------------------------------------------------------------
// YAML file → proto

/**
 * Validates one YAML config file as the service would (errors are ConfigError
 * `<fileName>: <message>`) and converts it to a RateLimitConfig named `resourceName`.
 */
export function yamlToRateLimitConfig(fileName: string, content: string, resourceName: string): RateLimitConfigProto {
  // The service's own loader: every YAML error, key and value check, with upstream's texts.
  loadConfig([{ name: fileName, content }], { mergeDomainConfig: false, stats: new StatsStore() });
  const root = decodeRoot(parseYaml(content));
  return RateLimitConfigProto.fromPartial({
    name: resourceName,
    domain: root.domain,
    descriptors: root.descriptors.map((d) => descriptorToProto(fileName, root.domain, d)),
  });
}

function descriptorToProto(fileName: string, parentKey: string, d: YamlDescriptor): RateLimitDescriptorProto {
  const fullKey = `${parentKey}.${d.value !== '' ? `${d.key}_${d.value}` : d.key}`;
  const rl = d.rateLimit;
  return {
    key: d.key,
    value: d.value,
    rateLimit: rl === undefined ? undefined : policyToProto(rl),
    rateLimits: d.rateLimits.map(policyToProto),
    descriptors: d.descriptors.map((c) => descriptorToProto(fileName, fullKey, c)),
    shadowMode: d.shadowMode,
    detailedMetric: d.detailedMetric,
    quotaMode: d.quotaMode,
    valueToMetric: d.valueToMetric,
    shareThreshold: d.shareThreshold,
    metadata: d.metadata === undefined ? undefined : convertMetadata(d.metadata),
  };
}

/** Whether an Any of this type URL holds a RateLimitConfig (what follows its last `/`). */
export function isRateLimitConfigType(typeUrl: string): boolean {
  return typeUrl.slice(typeUrl.lastIndexOf('/') + 1) === RATE_LIMIT_CONFIG_MESSAGE;
}

/** Unpacks one Any as a RateLimitConfig document for the loader. */
export function decodeResource(any: { readonly typeUrl: string; readonly value: Uint8Array }, index: number): ConfigObject {
  if (!isRateLimitConfigType(any.typeUrl)) {
    throw new ConfigError(
      `resource ${index}: cannot unpack ${JSON.stringify(any.typeUrl)} as ${RATE_LIMIT_CONFIG_MESSAGE}: mismatched message type`,
    );
  }
  let proto: RateLimitConfigProto;
  try {
    proto = RateLimitConfigProto.decode(any.value);
  } catch (err) {
    throw new ConfigError(`resource ${index}: cannot decode ${RATE_LIMIT_CONFIG_MESSAGE}: ${err instanceof Error ? err.message : String(err)}`);
  }
  return rateLimitConfigToObject(proto);
}
