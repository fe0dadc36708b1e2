/**
 * Shared by the deploy/ and envoy/ checks: YAML loading of the manifests, the Envoy configs found in
 * them, and small accessors. Everything is plain parsed YAML (`any`-typed on purpose: these are
 * foreign schemas — Kubernetes, Envoy — checked field by field by the tests).
 */
/* eslint-disable @typescript-eslint/no-explicit-any */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { SETTINGS_TABLE } from '../../src/settings/table';

export const ROOT = path.resolve(__dirname, '..', '..');
export const K8S_DIR = path.join(ROOT, 'deploy', 'kubernetes');
export const ENVOY_YAML = path.join(ROOT, 'envoy', 'envoy.yaml');
export const EXAMPLE_CONFIG = path.join(ROOT, 'examples', 'runtime', 'ratelimit', 'config', 'example.yaml');
export const GEN_CERTS = path.join(ROOT, 'envoy', 'gen-certs.sh');

/** The client certificate SAN gen-certs.sh gives Envoy (GRPC_CLIENT_TLS_SAN). */
export const ENVOY_CLIENT_SAN = 'envoy.ratelimit.test';

export type Json = any;

export interface YamlDoc {
  readonly file: string;
  readonly index: number;
  readonly value: Json;
}

/** Every `*.yaml` / `*.yml` file under `dir`, sorted. */
export function yamlFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const full = path.join(d, e.name);
      if (e.isDirectory()) walk(full);
      else if (/\.ya?ml$/.test(e.name)) out.push(full);
    }
  };
  walk(dir);
  return out.sort();
}

/** All documents of a multi-document YAML file; throws on any YAML error. */
export function loadDocs(file: string): YamlDoc[] {
  const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'));
  const list = Array.isArray(docs) ? docs : [docs];
  const out: YamlDoc[] = [];
  list.forEach((doc, index) => {
    if (doc.errors.length > 0) throw new Error(`${rel(file)} document ${index}: ${doc.errors.map((e) => e.message).join('; ')}`);
    const value = doc.toJS();
    if (value !== null && value !== undefined) out.push({ file, index, value });
  });
  return out;
}

export function rel(file: string): string {
  return path.relative(ROOT, file);
}

export function parseYaml(text: string): Json {
  return parse(text);
}

export interface PodSource {
  readonly file: string;
  readonly kind: string;
  readonly name: string;
  readonly labels: Record<string, string>;
  readonly spec: Json;
}

const WORKLOADS = new Set(['Deployment', 'StatefulSet', 'DaemonSet', 'ReplicaSet', 'Job']);

/** Pod specs of the workloads in `docs` (Deployments etc. and bare Pods). */
export function podSpecs(docs: readonly YamlDoc[]): PodSource[] {
  const out: PodSource[] = [];
  for (const { file, value } of docs) {
    if (WORKLOADS.has(value.kind)) {
      out.push({
        file,
        kind: value.kind,
        name: value.metadata?.name,
        labels: value.spec?.template?.metadata?.labels ?? {},
        spec: value.spec?.template?.spec ?? {},
      });
    } else if (value.kind === 'Pod') {
      out.push({ file, kind: 'Pod', name: value.metadata?.name, labels: value.metadata?.labels ?? {}, spec: value.spec ?? {} });
    }
  }
  return out;
}

/** The rate limit service's container: named `ratelimit`, or an image whose last path segment is `ratelimit`. */
export function isRatelimitContainer(c: Json): boolean {
  if (c?.name === 'ratelimit') return true;
  const image = String(c?.image ?? '');
  const last = image.split('/').pop() ?? '';
  return /^ratelimit([:@].*)?$/.test(last);
}

/** `env` entries with a literal value, as an environment object. */
export function containerEnv(c: Json): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of c?.env ?? []) if (typeof e?.value === 'string') env[e.name] = e.value;
  return env;
}

/** Resolves a probe / Service port (number or name) against a container's ports. */
export function resolvePort(port: Json, containers: readonly Json[]): number | undefined {
  if (typeof port === 'number') return port;
  if (typeof port === 'string' && /^\d+$/.test(port)) return Number(port);
  for (const c of containers) for (const p of c?.ports ?? []) if (p?.name === port) return p.containerPort;
  return undefined;
}

const TEMPLATED = SETTINGS_TABLE.filter((s) => s.templated).map(
  (s) => new RegExp('^' + s.name.split('<NAME>').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('[A-Za-z0-9_]+') + '$'),
);
const NAMES = new Set(SETTINGS_TABLE.filter((s) => !s.templated).flatMap((s) => (s.alias ? [s.name, s.alias] : [s.name])));

/** Whether the service reads this variable (a SETTINGS_TABLE name or alias, or a templated family member). */
export function isKnownSetting(name: string): boolean {
  return NAMES.has(name) || TEMPLATED.some((re) => re.test(name));
}

export interface EnvoyConfig {
  /** Where it comes from, for messages. */
  readonly source: string;
  /** The ConfigMap it is embedded in, if any. */
  readonly configMap?: { readonly file: string; readonly name: string; readonly key: string };
  readonly config: Json;
}

/** Envoy bootstraps: envoy/envoy.yaml and every ConfigMap entry that holds one. */
export function envoyConfigs(k8sDocs: readonly YamlDoc[]): EnvoyConfig[] {
  const out: EnvoyConfig[] = [{ source: rel(ENVOY_YAML), config: parseYaml(fs.readFileSync(ENVOY_YAML, 'utf8')) }];
  for (const { file, value } of k8sDocs) {
    if (value.kind !== 'ConfigMap') continue;
    for (const [key, text] of Object.entries<Json>(value.data ?? {})) {
      if (typeof text !== 'string' || !/\.ya?ml$/.test(key)) continue;
      const parsed = parseYaml(text);
      if (parsed && typeof parsed === 'object' && 'static_resources' in parsed) {
        out.push({ source: `${rel(file)} ConfigMap ${value.metadata.name} ${key}`, configMap: { file, name: value.metadata.name, key }, config: parsed });
      }
    }
  }
  return out;
}

export interface RateLimitConfigEntry {
  readonly source: string;
  readonly file: string;
  readonly configMap: string;
  readonly key: string;
  readonly text: string;
  readonly parsed: Json;
}

/** Rate limit configs held by ConfigMaps (entries with a top-level `domain` and `descriptors`). */
export function rateLimitConfigMaps(k8sDocs: readonly YamlDoc[]): RateLimitConfigEntry[] {
  const out: RateLimitConfigEntry[] = [];
  for (const { file, value } of k8sDocs) {
    if (value.kind !== 'ConfigMap') continue;
    for (const [key, text] of Object.entries<Json>(value.data ?? {})) {
      if (typeof text !== 'string') continue;
      const parsed = parseYaml(text);
      if (parsed && typeof parsed === 'object' && 'domain' in parsed && 'descriptors' in parsed) {
        out.push({ source: `${rel(file)} ConfigMap ${value.metadata.name} ${key}`, file, configMap: value.metadata.name, key, text, parsed });
      }
    }
  }
  return out;
}

/** The HTTP filters of every HTTP connection manager of an Envoy bootstrap. */
export function httpConnectionManagers(config: Json): Json[] {
  const out: Json[] = [];
  for (const l of config?.static_resources?.listeners ?? []) {
    for (const fc of l?.filter_chains ?? []) {
      for (const f of fc?.filters ?? []) {
        if (f?.name === 'envoy.filters.network.http_connection_manager') out.push(f.typed_config);
      }
    }
  }
  return out;
}

export function rateLimitFilters(config: Json): Json[] {
  return httpConnectionManagers(config).flatMap((hcm) =>
    (hcm?.http_filters ?? []).filter((f: Json) => f?.name === 'envoy.filters.http.ratelimit').map((f: Json) => f.typed_config),
  );
}

/** Every `rate_limits` entry of every route (and virtual host) of the bootstrap. */
export function routeRateLimits(config: Json): Json[] {
  const out: Json[] = [];
  for (const hcm of httpConnectionManagers(config)) {
    for (const vh of hcm?.route_config?.virtual_hosts ?? []) {
      out.push(...(vh?.rate_limits ?? []));
      for (const r of vh?.routes ?? []) out.push(...(r?.route?.rate_limits ?? []));
    }
  }
  return out;
}

/** The descriptor key an Envoy rate limit action produces (Envoy's built-in names where fixed). */
export function actionKey(action: Json): string {
  if ('remote_address' in action) return 'remote_address';
  if ('source_cluster' in action) return 'source_cluster';
  if ('destination_cluster' in action) return 'destination_cluster';
  if ('request_headers' in action) return action.request_headers.descriptor_key;
  if ('generic_key' in action) return action.generic_key.descriptor_key ?? 'generic_key';
  if ('header_value_match' in action) return action.header_value_match.descriptor_key ?? 'header_match';
  if ('masked_remote_address' in action) return 'masked_remote_address';
  if ('query_parameter_value_match' in action) return action.query_parameter_value_match.descriptor_key ?? 'query_match';
  throw new Error(`unknown rate limit action ${JSON.stringify(action)}`);
}

export function cluster(config: Json, name: string): Json | undefined {
  return (config?.static_resources?.clusters ?? []).find((c: Json) => c?.name === name);
}

/** Every `filename:` under a value (DataSource file paths). */
export function filenames(value: Json): string[] {
  if (Array.isArray(value)) return value.flatMap(filenames);
  if (value && typeof value === 'object') {
    return Object.entries(value).flatMap(([k, v]) => (k === 'filename' && typeof v === 'string' ? [v] : filenames(v)));
  }
  return [];
}

/** All `key:` values of a rate limit config's descriptor tree. */
export function descriptorKeys(descriptors: Json): Set<string> {
  const keys = new Set<string>();
  const walk = (list: Json): void => {
    for (const d of list ?? []) {
      keys.add(d.key);
      walk(d.descriptors);
    }
  };
  walk(descriptors);
  return keys;
}

/** Whether the key sequence is a path of nested descriptors (k1 at the top, k2 under a k1, ...). */
export function hasDescriptorPath(descriptors: Json, keys: readonly string[]): boolean {
  if (keys.length === 0) return true;
  return (descriptors ?? []).some((d: Json) => d.key === keys[0] && (keys.length === 1 || hasDescriptorPath(d.descriptors, keys.slice(1))));
}

/**
 * Whether a Kubernetes label selector (`matchLabels` and `matchExpressions` with In, NotIn, Exists,
 * DoesNotExist) selects these labels. An empty selector selects everything.
 */
export function selects(selector: Json, labels: Record<string, string>): boolean {
  for (const [k, v] of Object.entries<Json>(selector?.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector?.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const values: string[] = e.values ?? [];
    const ok =
      e.operator === 'In' ? has && values.includes(labels[e.key]!)
      : e.operator === 'NotIn' ? !has || !values.includes(labels[e.key]!)
      : e.operator === 'Exists' ? has
      : e.operator === 'DoesNotExist' ? !has
      : false;
    if (!ok) return false;
  }
  return true;
}

/** The Secret key an `env` entry of a container takes its value from (`valueFrom.secretKeyRef`). */
export function envSecretRef(c: Json, name: string): { name: string; key: string; optional: boolean } | undefined {
  const ref = (c?.env ?? []).find((e: Json) => e?.name === name)?.valueFrom?.secretKeyRef;
  return ref ? { name: ref.name, key: ref.key, optional: ref.optional === true } : undefined;
}

/**
 * `$(VAR)` in a container's command or args, replaced as the kubelet does: by the container's
 * variable when it has one (else left as is); `$$` stands for `$`.
 */
export function expandVars(text: string, env: Record<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m: string, name: string | undefined) =>
    name === undefined ? '$' : Object.prototype.hasOwnProperty.call(env, name) ? env[name]! : m,
  );
}
