/**
 * Static checks of the deployment material: the Kubernetes manifests under deploy/kubernetes (every
 * YAML file, multi-document) and the Envoy configs (envoy/envoy.yaml and the ones embedded in
 * ConfigMaps). They must agree with the service: its settings table, its ports and health check,
 * its config loader, the example config's domain and descriptor keys, and mTLS towards it.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfig } from '../../src/config';
import { loadSettings } from '../../src/settings';
import { StatsStore } from '../../src/stats/store';
import {
  ENVOY_CLIENT_SAN,
  ENVOY_YAML,
  EXAMPLE_CONFIG,
  K8S_DIR,
  ROOT,
  actionKey,
  cluster,
  containerEnv,
  descriptorKeys,
  envSecretRef,
  envoyConfigs,
  filenames,
  hasDescriptorPath,
  httpConnectionManagers,
  isKnownSetting,
  isRatelimitContainer,
  loadDocs,
  parseYaml,
  podSpecs,
  rateLimitConfigMaps,
  rateLimitFilters,
  rel,
  resolvePort,
  routeRateLimits,
  selects,
  yamlFiles,
} from './helpers';
import type { Json, PodSource, YamlDoc } from './helpers';

const FILES = yamlFiles(K8S_DIR);
const PATTERNS = fs
  .readdirSync(K8S_DIR, { withFileTypes: true })
  .filter((e) => e.isDirectory())
  .map((e) => path.join(K8S_DIR, e.name))
  .sort();
const DOCS: YamlDoc[] = FILES.flatMap(loadDocs);
const OBJECTS = DOCS.filter((d) => d.value.kind !== 'Kustomization');
const PODS = podSpecs(OBJECTS);
const RL = PODS.flatMap((pod) =>
  (pod.spec.containers ?? []).filter(isRatelimitContainer).map((c: Json) => ({ pod, c, where: `${rel(pod.file)} ${pod.name}/${c.name}` })),
);
const ENVOY = envoyConfigs(OBJECTS);
const RL_CONFIGS = rateLimitConfigMaps(OBJECTS);
const EXAMPLE = parseYaml(fs.readFileSync(EXAMPLE_CONFIG, 'utf8'));

/** A protobuf JSON Duration (`0.1s`) in ms. */
function durationMs(text: string): number {
  const m = /^(\d+(?:\.\d+)?)s$/.exec(String(text));
  if (m === null) throw new Error(`not a Duration: ${text}`);
  return Number(m[1]) * 1000;
}

/** Is `file` one of the Secret templates (documentation, never applied)? */
const isTemplate = (file: string): boolean => /\.template\.ya?ml$/.test(file);
const inDir = (dir: string) => (d: { file: string }) => d.file.startsWith(dir + path.sep);

/** The ports the service listens on, from its own settings loader. */
function servicePorts(env: Record<string, string>): { http: number; grpc: number; debug: number; metrics?: number } {
  const s = loadSettings(env);
  const out: { http: number; grpc: number; debug: number; metrics?: number } = { http: s.http.port, grpc: s.grpc.port, debug: s.debug.port };
  if (s.stats.sink === 'prometheus') {
    const m = /:(\d+)$/.exec(s.stats.prometheus.addr);
    if (m) out.metrics = Number(m[1]);
  }
  return out;
}

function allContainers(pod: PodSource): Json[] {
  return [...(pod.spec.initContainers ?? []), ...(pod.spec.containers ?? [])];
}

describe('deploy/kubernetes: files', () => {
  test('there are manifests for the sidecar and the shared-service patterns', () => {
    expect(PATTERNS.map((p) => path.basename(p))).toEqual(expect.arrayContaining(['sidecar', 'shared']));
    expect(FILES.length).toBeGreaterThan(0);
  });

  test.each(FILES.map((f) => [rel(f), f]))('%s parses and every document is a Kubernetes object', (_name, file) => {
    const docs = loadDocs(file);
    expect(docs.length).toBeGreaterThan(0);
    for (const { value, index } of docs) {
      expect({ index, apiVersion: typeof value.apiVersion, kind: typeof value.kind }).toEqual({ index, apiVersion: 'string', kind: 'string' });
      if (value.kind !== 'Kustomization') expect(typeof value.metadata?.name).toBe('string');
    }
  });

  test.each(PATTERNS.map((p) => [path.basename(p), p]))('%s: kustomization lists existing files and never a Secret template', (_name, dir) => {
    const k = loadDocs(path.join(dir, 'kustomization.yaml'))[0]!.value;
    expect(k.kind).toBe('Kustomization');
    const resources: string[] = k.resources ?? [];
    expect(resources.length).toBeGreaterThan(0);
    for (const r of resources) {
      expect(fs.existsSync(path.join(dir, r))).toBe(true);
      expect(isTemplate(r)).toBe(false);
      // No Secret with placeholder data may ever be applied over the real one.
      for (const d of loadDocs(path.join(dir, r))) expect(d.value.kind).not.toBe('Secret');
    }
    // The image the manifests name can be replaced in one place.
    expect((k.images ?? []).map((i: Json) => i.name)).toContain('ratelimit');
  });
});

describe('deploy/kubernetes: the ratelimit container', () => {
  test('each pattern runs it', () => {
    for (const dir of PATTERNS) expect(RL.filter(({ pod }) => inDir(dir)(pod)).length).toBeGreaterThan(0);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: sets only variables the service reads, with values it accepts', (_w, { c }) => {
    const names: string[] = (c.env ?? []).map((e: Json) => e.name);
    expect(names.filter((n) => !isKnownSetting(n))).toEqual([]);
    expect(new Set(names).size).toBe(names.length);
    expect(() => loadSettings(containerEnv(c))).not.toThrow();
  });

  test.each(RL.map((x) => [x.where, x]))('%s: keeps serving after SIGTERM for a delay, and stops inside the grace period', (_w, { c, pod }) => {
    const { shutdownDelayMs, drainTimeoutMs } = loadSettings(containerEnv(c)).server;
    expect(shutdownDelayMs).toBeGreaterThan(0);
    // Kubernetes' default grace is 30 s; the process is gone within delay + drain + 1 s.
    expect((pod.spec.terminationGracePeriodSeconds ?? 30) * 1000).toBeGreaterThan(shutdownDelayMs + drainTimeoutMs + 1000);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: Ready only once a config has loaded', (_w, { c }) => {
    expect(loadSettings(containerEnv(c)).config.healthyWithAtLeastOneConfigLoaded).toBe(true);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: a Redis call gives up before the Envoys of its pattern do', (_w, { c, pod }) => {
    const timeouts = ENVOY.filter((e) => e.configMap !== undefined && path.dirname(e.configMap.file) === path.dirname(pod.file))
      .flatMap((e) => rateLimitFilters(e.config))
      .map((f) => durationMs(f.timeout ?? '0.02s'));
    expect(timeouts.length).toBeGreaterThan(0);
    const { redis } = loadSettings(containerEnv(c));
    // Its answer (BACKEND_FAILURE_MODE) must reach Envoy before Envoy stops waiting: 10 ms to spare.
    expect(redis.timeoutMs).toBeLessThanOrEqual(Math.min(...timeouts) - 10);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: container and probe ports are the service ports', (_w, { c }) => {
    const env = containerEnv(c);
    const ports = servicePorts(env);
    const allowed = new Set(Object.values(ports));
    const byName: Record<string, number> = { PORT: ports.http, GRPC_PORT: ports.grpc, DEBUG_PORT: ports.debug };
    for (const [k, v] of Object.entries(byName)) if (env[k] !== undefined) expect(Number(env[k])).toBe(v);
    expect(allowed).toEqual(new Set([env.PORT ? Number(env.PORT) : 8080, env.GRPC_PORT ? Number(env.GRPC_PORT) : 8081, env.DEBUG_PORT ? Number(env.DEBUG_PORT) : 6070, ...(ports.metrics ? [ports.metrics] : [])]));
    for (const p of c.ports ?? []) expect(allowed).toContain(p.containerPort);
    for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
      const pr = c[probe];
      if (!pr) continue;
      const port = resolvePort(pr.httpGet?.port ?? pr.tcpSocket?.port ?? pr.grpc?.port, [c]);
      expect({ probe, port }).toEqual({ probe, port: expect.any(Number) });
      expect(allowed).toContain(port);
    }
    // Named ports say what they are.
    for (const p of c.ports ?? []) {
      if (/grpc/.test(p.name)) expect(p.containerPort).toBe(ports.grpc);
      else if (/debug/.test(p.name)) expect(p.containerPort).toBe(ports.debug);
      else if (/metrics|prom/.test(p.name)) expect(p.containerPort).toBe(ports.metrics);
      else if (/http/.test(p.name)) expect(p.containerPort).toBe(ports.http);
    }
  });

  test.each(RL.map((x) => [x.where, x]))('%s: readiness and liveness probes GET /healthcheck on the HTTP port', (_w, { c }) => {
    const http = servicePorts(containerEnv(c)).http;
    expect(http).toBe(8080);
    expect(c.readinessProbe).toBeDefined();
    expect(c.livenessProbe).toBeDefined();
    for (const probe of ['readinessProbe', 'livenessProbe', 'startupProbe']) {
      const pr = c[probe];
      if (!pr) continue;
      expect({ probe, path: pr.httpGet?.path, port: resolvePort(pr.httpGet?.port, [c]) }).toEqual({ probe, path: '/healthcheck', port: http });
    }
  });

  test.each(RL.map((x) => [x.where, x]))('%s: config ConfigMap mounted where RUNTIME_* point, holding a loadable config', (_w, { c, pod }) => {
    const s = loadSettings(containerEnv(c));
    expect(s.runtime.watchRoot).toBe(false);
    const dir = path.posix.join(s.runtime.root, s.runtime.subdirectory, s.runtime.appDirectory);
    const mount = (c.volumeMounts ?? []).find((m: Json) => m.mountPath === dir);
    expect(mount).toBeDefined();
    const vol = (pod.spec.volumes ?? []).find((v: Json) => v.name === mount.name);
    expect(vol?.configMap?.name).toBeDefined();
    const sameDir = path.dirname(pod.file);
    const configs = RL_CONFIGS.filter((r) => r.configMap === vol.configMap.name && path.dirname(r.file) === sameDir);
    expect(configs.length).toBeGreaterThan(0);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: gRPC over mTLS, certificate files from one mounted Secret', (_w, { c, pod }) => {
    const env = containerEnv(c);
    expect(env.GRPC_SERVER_USE_TLS).toBe('true');
    expect(env.GRPC_CLIENT_TLS_SAN).toBe(ENVOY_CLIENT_SAN);
    const files = [env.GRPC_SERVER_TLS_CERT, env.GRPC_SERVER_TLS_KEY, env.GRPC_CLIENT_TLS_CACERT];
    for (const f of files) expect(f).toMatch(/^\//);
    // Upstream requires certificate and key in the same directory (it watches that directory).
    expect(path.posix.dirname(env.GRPC_SERVER_TLS_CERT!)).toBe(path.posix.dirname(env.GRPC_SERVER_TLS_KEY!));
    for (const f of files) {
      const mount = (c.volumeMounts ?? []).find((m: Json) => path.posix.dirname(f!) === m.mountPath);
      expect({ file: f, mounted: Boolean(mount) }).toEqual({ file: f, mounted: true });
      const vol = (pod.spec.volumes ?? []).find((v: Json) => v.name === mount.name);
      expect(vol?.secret?.secretName).toBeDefined();
      expect(secretFiles(pod.file, vol.secret)).toContain(path.posix.basename(f!));
    }
  });

  test('the Dockerfile user matches the pods (runAsUser of the ratelimit containers)', () => {
    const user = /^USER\s+(\d+)/m.exec(fs.readFileSync(path.join(ROOT, 'deploy', 'Dockerfile'), 'utf8'))?.[1];
    expect(user).toBeDefined();
    for (const { c } of RL) expect(String(c.securityContext?.runAsUser)).toBe(user);
  });
});

/** File names a Secret volume exposes: its `items` paths, else the keys of the Secret template. */
function secretFiles(podFile: string, secret: Json): string[] {
  if (secret.items) return secret.items.map((i: Json) => i.path);
  return secretKeys(podFile, secret.secretName);
}

function secretKeys(podFile: string, name: string): string[] {
  const templates = OBJECTS.filter((d) => path.dirname(d.file) === path.dirname(podFile) && d.value.kind === 'Secret' && d.value.metadata.name === name);
  expect({ secret: name, templates: templates.length }).toEqual({ secret: name, templates: 1 });
  const v = templates[0]!.value;
  return [...Object.keys(v.stringData ?? {}), ...Object.keys(v.data ?? {})];
}

describe('deploy/kubernetes: every pod', () => {
  test.each(PODS.map((p) => [`${rel(p.file)} ${p.name}`, p]))('%s: hardened containers with resources', (_w, pod) => {
    for (const c of allContainers(pod)) {
      const sc = c.securityContext ?? {};
      const runAsNonRoot = sc.runAsNonRoot ?? pod.spec.securityContext?.runAsNonRoot;
      expect({ container: c.name, runAsNonRoot }).toEqual({ container: c.name, runAsNonRoot: true });
      expect({ container: c.name, readOnlyRootFilesystem: sc.readOnlyRootFilesystem }).toEqual({ container: c.name, readOnlyRootFilesystem: true });
      expect({ container: c.name, allowPrivilegeEscalation: sc.allowPrivilegeEscalation }).toEqual({ container: c.name, allowPrivilegeEscalation: false });
      expect({ container: c.name, drop: sc.capabilities?.drop }).toEqual({ container: c.name, drop: expect.arrayContaining(['ALL']) });
      if (sc.runAsUser !== undefined) expect(sc.runAsUser).toBeGreaterThan(0);
      expect({ container: c.name, requests: Boolean(c.resources?.requests), limits: Boolean(c.resources?.limits) }).toEqual({
        container: c.name,
        requests: true,
        limits: true,
      });
    }
  });

  test.each(PODS.map((p) => [`${rel(p.file)} ${p.name}`, p]))('%s: volumes exist, mounts name volumes, ConfigMaps and Secrets are defined', (_w, pod) => {
    const volumes = new Map<string, Json>((pod.spec.volumes ?? []).map((v: Json) => [v.name, v]));
    for (const c of allContainers(pod)) for (const m of c.volumeMounts ?? []) expect({ mount: m.name, defined: volumes.has(m.name) }).toEqual({ mount: m.name, defined: true });
    for (const v of volumes.values()) {
      if (v.configMap) {
        const cm = OBJECTS.find((d) => path.dirname(d.file) === path.dirname(pod.file) && d.value.kind === 'ConfigMap' && d.value.metadata.name === v.configMap.name);
        expect({ configMap: v.configMap.name, defined: Boolean(cm) }).toEqual({ configMap: v.configMap.name, defined: true });
        for (const item of v.configMap.items ?? []) expect(Object.keys(cm!.value.data)).toContain(item.key);
      }
      if (v.secret) {
        const keys = secretKeys(pod.file, v.secret.secretName);
        for (const item of v.secret.items ?? []) expect(keys).toContain(item.key);
      }
    }
  });

  test('Deployment selectors match their pod labels', () => {
    for (const { value, file } of OBJECTS.filter((d) => d.value.kind === 'Deployment')) {
      const labels = value.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(value.spec.selector.matchLabels)) expect({ file: rel(file), [k]: labels[k] }).toEqual({ file: rel(file), [k]: v });
    }
  });

  test('every Service selects pods of its directory and targets ports they declare', () => {
    for (const { value, file } of OBJECTS.filter((d) => d.value.kind === 'Service')) {
      const selected = PODS.filter((p) => path.dirname(p.file) === path.dirname(file) && Object.entries(value.spec.selector).every(([k, v]) => p.labels[k] === v));
      expect({ service: value.metadata.name, selectsPods: selected.length > 0 }).toEqual({ service: value.metadata.name, selectsPods: true });
      expect(value.spec.type ?? 'ClusterIP').toBe('ClusterIP');
      for (const p of value.spec.ports) {
        const target = p.targetPort ?? p.port;
        for (const pod of selected) {
          const port = resolvePort(target, pod.spec.containers);
          const declared = pod.spec.containers.flatMap((c: Json) => (c.ports ?? []).map((cp: Json) => cp.containerPort));
          expect({ service: value.metadata.name, target, declared: declared.includes(port) }).toEqual({ service: value.metadata.name, target, declared: true });
        }
      }
    }
  });

  test('the shared pattern runs 2+ replicas behind a PodDisruptionBudget, with the gRPC, HTTP, debug and metrics ports', () => {
    const shared = path.join(K8S_DIR, 'shared');
    const dep = OBJECTS.find((d) => inDir(shared)(d) && d.value.kind === 'Deployment' && (d.value.spec.template.spec.containers ?? []).some(isRatelimitContainer));
    expect(dep?.value.spec.replicas).toBeGreaterThanOrEqual(2);
    const pdb = OBJECTS.find((d) => inDir(shared)(d) && d.value.kind === 'PodDisruptionBudget');
    expect(pdb).toBeDefined();
    const labels = dep!.value.spec.template.metadata.labels;
    for (const [k, v] of Object.entries(pdb!.value.spec.selector.matchLabels)) expect(labels[k]).toBe(v);
    const svc = OBJECTS.find((d) => inDir(shared)(d) && d.value.kind === 'Service' && d.value.metadata.name === 'ratelimit');
    expect(svc!.value.spec.ports.map((p: Json) => p.port).sort()).toEqual([6070, 8080, 8081, 9090]);
  });

  test('Prometheus finds the shared service: pod annotations and the ServiceMonitor name the port PROMETHEUS_ADDR listens on', () => {
    const shared = path.join(K8S_DIR, 'shared');
    const dep = OBJECTS.find((d) => inDir(shared)(d) && d.value.kind === 'Deployment' && (d.value.spec.template.spec.containers ?? []).some(isRatelimitContainer))!;
    const c = dep.value.spec.template.spec.containers.find(isRatelimitContainer);
    const env = new Map<string, string>(c.env.filter((e: Json) => e.value !== undefined).map((e: Json) => [e.name, e.value]));
    expect(env.get('USE_PROMETHEUS')).toBe('true');
    const port = Number(env.get('PROMETHEUS_ADDR')!.split(':').at(-1));
    const annotations = dep.value.spec.template.metadata.annotations;
    expect(annotations).toMatchObject({ 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(port), 'prometheus.io/path': '/metrics' });
    const containerPort = c.ports.find((p: Json) => p.containerPort === port);
    expect(containerPort?.name).toBe('metrics');
    const svc = OBJECTS.find((d) => inDir(shared)(d) && d.value.kind === 'Service' && d.value.metadata.name === 'ratelimit')!;
    const svcPort = svc.value.spec.ports.find((p: Json) => p.name === 'metrics');
    expect(svcPort.targetPort).toBe('metrics');
    const [monitor] = loadDocs(path.join(ROOT, 'deploy/observability/servicemonitor.yaml'));
    expect(monitor!.value.kind).toBe('ServiceMonitor');
    for (const [k, v] of Object.entries(monitor!.value.spec.selector.matchLabels)) expect(svc.value.metadata.labels[k]).toBe(v);
    expect(monitor!.value.spec.endpoints).toEqual([expect.objectContaining({ port: 'metrics', path: '/metrics' })]);
  });

  test('Redis runs as Deployment + Service `redis` on 6379 where REDIS_URL points', () => {
    for (const dir of PATTERNS) {
      const svc = OBJECTS.find((d) => inDir(dir)(d) && d.value.kind === 'Service' && d.value.metadata.name === 'redis');
      expect(svc?.value.spec.ports.map((p: Json) => p.port)).toEqual([6379]);
      for (const { c } of RL.filter((x) => inDir(dir)(x.pod))) expect(containerEnv(c).REDIS_URL).toBe('redis:6379');
    }
  });
});

describe('rate limit configs', () => {
  test('the ConfigMaps hold the example config', () => {
    expect(RL_CONFIGS.length).toBeGreaterThanOrEqual(PATTERNS.length);
    for (const r of RL_CONFIGS) expect({ source: r.source, config: r.parsed }).toEqual({ source: r.source, config: EXAMPLE });
  });

  test.each(RL_CONFIGS.map((r) => [r.source, r]))('%s is accepted by the service loader', (_s, r) => {
    expect(r.key).toMatch(/\.ya?ml$/);
    const config = loadConfig([{ name: r.key, content: r.text }], { mergeDomainConfig: false, stats: new StatsStore() });
    expect(config).toBeDefined();
  });

  test('one domain per ConfigMap', () => {
    const byMap = new Map<string, string[]>();
    for (const r of RL_CONFIGS) byMap.set(`${r.file}/${r.configMap}`, [...(byMap.get(`${r.file}/${r.configMap}`) ?? []), r.parsed.domain]);
    for (const domains of byMap.values()) expect(new Set(domains).size).toBe(domains.length);
  });
});

/** `domain:` values of every rate limit config under examples/. */
function exampleDomains(): Set<string> {
  const out = new Set<string>();
  for (const f of yamlFiles(path.join(ROOT, 'examples'))) {
    for (const d of loadDocs(f)) if (typeof d.value?.domain === 'string' && Array.isArray(d.value.descriptors)) out.add(d.value.domain);
  }
  return out;
}

describe('Envoy configs', () => {
  test('envoy/envoy.yaml, the sidecar ConfigMap and the caller example are all found', () => {
    expect(ENVOY.map((e) => e.source)).toEqual(
      expect.arrayContaining([
        rel(ENVOY_YAML),
        expect.stringContaining('deploy/kubernetes/sidecar/'),
        expect.stringContaining('deploy/kubernetes/shared/'),
      ]),
    );
  });

  test('the sidecar ConfigMap embeds envoy/envoy.yaml unchanged', () => {
    const embedded = ENVOY.filter((e) => e.configMap && e.configMap.file.includes(`${path.sep}sidecar${path.sep}`));
    expect(embedded.length).toBe(1);
    expect(embedded[0]!.config).toEqual(ENVOY[0]!.config);
  });

  test.each(ENVOY.map((e) => [e.source, e]))('%s: rate limit filter for a domain the configs define', (_s, { config }) => {
    const filters = rateLimitFilters(config);
    expect(filters.length).toBe(1);
    const f = filters[0];
    expect(f['@type']).toBe('type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit');
    expect(f.failure_mode_deny).toBe(false);
    expect(f.enable_x_ratelimit_headers).toBe('DRAFT_VERSION_03');
    expect(f.rate_limit_service.transport_api_version).toBe('V3');
    const clusterName = f.rate_limit_service.grpc_service.envoy_grpc.cluster_name;
    expect(cluster(config, clusterName)).toBeDefined();
    expect(exampleDomains()).toContain(f.domain);
    expect(RL_CONFIGS.map((r) => r.parsed.domain)).toContain(f.domain);
    // The rate limit filter must run before the router, which comes last.
    for (const hcm of httpConnectionManagers(config)) {
      const names = (hcm.http_filters as Json[]).map((h) => h.name);
      expect(names).toContain('envoy.filters.http.ratelimit');
      expect(names[names.length - 1]).toBe('envoy.filters.http.router');
    }
  });

  test.each(ENVOY.map((e) => [e.source, e]))('%s: route descriptors match the example config', (_s, { config }) => {
    const rateLimits = routeRateLimits(config);
    expect(rateLimits.length).toBeGreaterThan(0);
    const keys = descriptorKeys(EXAMPLE.descriptors);
    for (const rl of rateLimits) {
      const seq = (rl.actions as Json[]).map(actionKey);
      for (const k of seq) expect({ key: k, inExample: keys.has(k) }).toEqual({ key: k, inExample: true });
      // The entries of one descriptor must follow the nesting of the config.
      expect({ descriptor: seq, nested: hasDescriptorPath(EXAMPLE.descriptors, seq) }).toEqual({ descriptor: seq, nested: true });
    }
    const produced = new Set(rateLimits.flatMap((rl) => (rl.actions as Json[]).map(actionKey)));
    for (const k of ['remote_address', 'path', 'user', 'method', 'client', 'plan', 'feature']) expect(produced).toContain(k);
  });

  test.each(ENVOY.map((e) => [e.source, e]))('%s: the ratelimit cluster is HTTP/2 over mTLS with an exact SAN match', (_s, { config }) => {
    const name = rateLimitFilters(config)[0].rate_limit_service.grpc_service.envoy_grpc.cluster_name;
    const c = cluster(config, name);
    const h2 = c.typed_extension_protocol_options?.['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    expect(h2?.['@type']).toBe('type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions');
    expect(h2?.explicit_http_config?.http2_protocol_options).toBeDefined();
    const endpoints = c.load_assignment.endpoints.flatMap((e: Json) => e.lb_endpoints.map((l: Json) => l.endpoint.address.socket_address));
    for (const a of endpoints) expect(a.port_value).toBe(8081);

    expect(c.transport_socket?.name).toBe('envoy.transport_sockets.tls');
    const tls = c.transport_socket.typed_config;
    expect(tls['@type']).toBe('type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext');
    const ctx = tls.common_tls_context;
    expect(ctx.alpn_protocols).toContain('h2');
    expect(ctx.tls_certificates).toHaveLength(1);
    expect(ctx.tls_certificates[0].certificate_chain.filename).toMatch(/^\/etc\/envoy\/certs\//);
    expect(ctx.tls_certificates[0].private_key.filename).toMatch(/^\/etc\/envoy\/certs\//);
    expect(ctx.validation_context.trusted_ca.filename).toMatch(/^\/etc\/envoy\/certs\//);
    const sans = ctx.validation_context.match_typed_subject_alt_names;
    expect(sans).toEqual(expect.arrayContaining([{ san_type: 'DNS', matcher: { exact: 'ratelimit' } }]));
    expect(tls.sni).toBe('ratelimit');
  });

  test('the Envoy containers mount their config and every file it names', () => {
    const envoyContainers = PODS.flatMap((pod) => (pod.spec.containers ?? []).filter((c: Json) => /envoy/.test(String(c.image))).map((c: Json) => ({ pod, c })));
    expect(envoyContainers.length).toBeGreaterThan(0);
    for (const { pod, c } of envoyContainers) {
      const args: string[] = [...(c.command ?? []), ...(c.args ?? [])];
      const configPath = args[args.indexOf('-c') + 1]!;
      expect(args).toContain('-c');
      const files = [configPath];
      const mountOf = (f: string): Json =>
        (c.volumeMounts ?? [])
          .filter((m: Json) => f.startsWith(m.mountPath.replace(/\/?$/, '/')))
          .sort((a: Json, b: Json) => b.mountPath.length - a.mountPath.length)[0];
      const cfgMount = mountOf(configPath);
      const cfgVol = pod.spec.volumes.find((v: Json) => v.name === cfgMount?.name);
      expect(cfgVol?.configMap?.name).toBeDefined();
      const embedded = ENVOY.find((e) => e.configMap?.name === cfgVol.configMap.name && path.dirname(e.configMap?.file ?? '') === path.dirname(pod.file));
      expect(embedded).toBeDefined();
      expect(path.posix.relative(cfgMount.mountPath, configPath)).toBe(embedded!.configMap!.key);
      files.push(...filenames(embedded!.config));
      for (const f of files.slice(1)) {
        const m = mountOf(f);
        expect({ file: f, mounted: Boolean(m) }).toEqual({ file: f, mounted: true });
        const vol = pod.spec.volumes.find((v: Json) => v.name === m.name);
        const names = vol.secret ? secretFiles(pod.file, vol.secret) : Object.keys(OBJECTS.find((d) => d.value.kind === 'ConfigMap' && d.value.metadata.name === vol.configMap?.name)?.value.data ?? {});
        expect(names).toContain(path.posix.relative(m.mountPath, f));
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------
// Network policies and the Redis password

const README = fs.readFileSync(path.join(K8S_DIR, 'README.md'), 'utf8');
const PATTERN_CASES = PATTERNS.map((p) => [path.basename(p), p] as [string, string]);

/** A peer of an ingress rule, or ANYONE for a rule without `from` (every source). */
const ANYONE = 'anyone';
type Peer = Json | typeof ANYONE;

const policiesOf = (dir: string): YamlDoc[] => OBJECTS.filter((d) => inDir(dir)(d) && d.value.kind === 'NetworkPolicy');
const podsOf = (dir: string): PodSource[] => PODS.filter(inDir(dir));
const hasRatelimit = (pod: PodSource): boolean => (pod.spec.containers ?? []).some(isRatelimitContainer);
const isRedisPod = (pod: PodSource): boolean => (pod.spec.containers ?? []).some((c: Json) => c.name === 'redis');

function isIngressPolicy(np: Json): boolean {
  return (np.spec.policyTypes ?? ['Ingress']).includes('Ingress');
}

/** The ingress rules that apply to a pod: those of the Ingress policies of its directory selecting it. */
function ingressRules(pod: PodSource): Json[] {
  return policiesOf(path.dirname(pod.file))
    .filter((d) => isIngressPolicy(d.value) && selects(d.value.spec.podSelector, pod.labels))
    .flatMap((d) => d.value.spec.ingress ?? []);
}

/** Whether a rule's `ports` entry admits TCP `port` on this pod (numbers, names, `endPort` ranges). */
function admits(entry: Json, port: number, pod: PodSource): boolean {
  if ((entry.protocol ?? 'TCP') !== 'TCP') return false;
  if (entry.port === undefined) return true;
  const from = resolvePort(entry.port, pod.spec.containers ?? []);
  if (from === undefined) return false;
  return entry.endPort === undefined ? from === port : from <= port && port <= entry.endPort;
}

/** The peers a pod accepts on TCP `port`; `[ANYONE]` for a pod no Ingress policy selects. */
function peersOn(pod: PodSource, port: number): Peer[] {
  const isolated = policiesOf(path.dirname(pod.file)).some((d) => isIngressPolicy(d.value) && selects(d.value.spec.podSelector, pod.labels));
  if (!isolated) return [ANYONE];
  const out: Peer[] = [];
  for (const rule of ingressRules(pod)) {
    const ports: Json[] | undefined = rule.ports;
    if (ports !== undefined && ports.length > 0 && !ports.some((e) => admits(e, port, pod))) continue;
    const from: Json[] | undefined = rule.from;
    out.push(...(from === undefined || from.length === 0 ? [ANYONE] : from));
  }
  return out;
}

/** The ports a pod's ingress rules name (every rule names its ports: see the test below). */
function openPorts(pod: PodSource): number[] {
  const out = new Set<number>();
  for (const rule of ingressRules(pod)) for (const e of rule.ports ?? []) out.add(resolvePort(e.port, pod.spec.containers ?? [])!);
  return [...out].sort((a, b) => a - b);
}

/** The ports the Services of the pod's directory forward to it. */
function serviceTargets(pod: PodSource): number[] {
  const out = new Set<number>();
  for (const { value, file } of OBJECTS.filter((d) => d.value.kind === 'Service')) {
    if (path.dirname(file) !== path.dirname(pod.file) || !selects({ matchLabels: value.spec.selector }, pod.labels)) continue;
    for (const p of value.spec.ports) {
      const port = resolvePort(p.targetPort ?? p.port, pod.spec.containers ?? []);
      if (port !== undefined) out.add(port);
    }
  }
  return [...out];
}

describe('deploy/kubernetes: network policies', () => {
  test.each(PATTERN_CASES)('%s: NetworkPolicies exist and kustomization.yaml applies every one', (_name, dir) => {
    const policies = policiesOf(dir);
    expect(policies.length).toBeGreaterThan(0);
    const resources: string[] = loadDocs(path.join(dir, 'kustomization.yaml'))[0]!.value.resources ?? [];
    for (const d of policies) expect({ policy: d.value.metadata.name, applied: resources.includes(path.basename(d.file)) }).toEqual({ policy: d.value.metadata.name, applied: true });
  });

  test.each(PATTERN_CASES)('%s: every pod is isolated for ingress, and every policy selects a pod of the pattern', (_name, dir) => {
    for (const pod of podsOf(dir)) {
      const isolated = policiesOf(dir).some((d) => isIngressPolicy(d.value) && selects(d.value.spec.podSelector, pod.labels));
      expect({ pod: pod.name, isolated }).toEqual({ pod: pod.name, isolated: true });
    }
    for (const { value } of policiesOf(dir)) {
      expect({ policy: value.metadata.name, ingress: isIngressPolicy(value) }).toEqual({ policy: value.metadata.name, ingress: true });
      const selected = podsOf(dir).filter((p) => selects(value.spec.podSelector, p.labels));
      expect({ policy: value.metadata.name, selectsPods: selected.length > 0 }).toEqual({ policy: value.metadata.name, selectsPods: true });
    }
  });

  test.each(PATTERN_CASES)('%s: every rule names ports the selected pods declare, and peers by pod labels', (_name, dir) => {
    for (const { value } of policiesOf(dir)) {
      const selected = podsOf(dir).filter((p) => selects(value.spec.podSelector, p.labels));
      for (const rule of value.spec.ingress ?? []) {
        // A rule without ports would open every port, the unauthenticated ones included.
        expect({ policy: value.metadata.name, ports: (rule.ports ?? []).length > 0 }).toEqual({ policy: value.metadata.name, ports: true });
        for (const e of rule.ports ?? []) {
          for (const pod of selected) {
            const port = resolvePort(e.port, pod.spec.containers);
            const declared = pod.spec.containers.flatMap((c: Json) => (c.ports ?? []).map((cp: Json) => cp.containerPort));
            expect({ policy: value.metadata.name, pod: pod.name, port: e.port, declared: declared.includes(port) }).toEqual({ policy: value.metadata.name, pod: pod.name, port: e.port, declared: true });
          }
        }
        for (const peer of rule.from ?? []) {
          expect({ policy: value.metadata.name, ipBlock: peer.ipBlock }).toEqual({ policy: value.metadata.name, ipBlock: undefined });
          expect({ policy: value.metadata.name, podSelector: Boolean(peer.podSelector) }).toEqual({ policy: value.metadata.name, podSelector: true });
          if (peer.namespaceSelector === undefined) {
            // Same namespace: the selector must match a pod of the pattern (a typo in a label fails here).
            const matched = podsOf(dir).filter((p) => selects(peer.podSelector, p.labels));
            expect({ policy: value.metadata.name, peer, matchesPods: matched.length > 0 }).toEqual({ policy: value.metadata.name, peer, matchesPods: true });
          } else {
            // From other namespaces: named pods only, never whole namespaces.
            expect({ policy: value.metadata.name, peer, podLabels: Object.keys(peer.podSelector.matchLabels ?? {}).length > 0 }).toEqual({ policy: value.metadata.name, peer, podLabels: true });
          }
        }
      }
    }
  });

  test.each(PATTERN_CASES)('%s: Redis accepts connections only from the pods that run the ratelimit container, on 6379 only', (_name, dir) => {
    const redis = podsOf(dir).filter(isRedisPod);
    expect(redis.length).toBe(1);
    const pod = redis[0]!;
    expect(openPorts(pod)).toEqual([6379]);
    const peers = peersOn(pod, 6379);
    expect(peers.length).toBeGreaterThan(0);
    for (const peer of peers) {
      expect(peer).not.toBe(ANYONE);
      expect({ peer, namespaceSelector: peer.namespaceSelector, ipBlock: peer.ipBlock }).toEqual({ peer, namespaceSelector: undefined, ipBlock: undefined });
    }
    for (const p of podsOf(dir)) {
      const admitted = peers.some((peer) => peer !== ANYONE && selects(peer.podSelector, p.labels));
      expect({ pod: p.name, admitted }).toEqual({ pod: p.name, admitted: hasRatelimit(p) });
    }
  });

  test.each(PATTERN_CASES)('%s: a pod accepts connections only on ports its Services forward to, or its metrics port', (_name, dir) => {
    for (const pod of podsOf(dir)) {
      const metrics = (pod.spec.containers ?? []).filter(isRatelimitContainer).map((c: Json) => servicePorts(containerEnv(c)).metrics).filter((m: number | undefined) => m !== undefined);
      const allowed = new Set([...serviceTargets(pod), ...metrics]);
      for (const port of openPorts(pod)) expect({ pod: pod.name, port, allowed: allowed.has(port) }).toEqual({ pod: pod.name, port, allowed: true });
    }
  });

  test('sidecar: no other pod reaches the ratelimit container (Envoy calls it over localhost)', () => {
    const dir = path.join(K8S_DIR, 'sidecar');
    const rl = RL.filter((x) => inDir(dir)(x.pod));
    expect(rl.length).toBeGreaterThan(0);
    for (const { pod, c, where } of rl) {
      const ports = servicePorts(containerEnv(c));
      for (const [name, port] of Object.entries(ports)) expect({ where, [name]: port, peers: peersOn(pod, port!) }).toEqual({ where, [name]: port, peers: [] });
    }
    // Envoy's listener is the pod's one open port.
    for (const { pod } of rl) expect(openPorts(pod)).toEqual(serviceTargets(pod).sort((a, b) => a - b));
  });

  test('shared: gRPC only from the Envoy pods labelled as the README says (any namespace); HTTP and debug from no pod; metrics from named pods', () => {
    const dir = path.join(K8S_DIR, 'shared');
    const rl = RL.filter((x) => inDir(dir)(x.pod));
    expect(rl.length).toBeGreaterThan(0);
    for (const { pod, c } of rl) {
      const ports = servicePorts(containerEnv(c));
      const grpc = peersOn(pod, ports.grpc);
      expect(grpc).toHaveLength(1);
      const envoy = grpc[0];
      expect(envoy).not.toBe(ANYONE);
      // Callers run in any namespace; the pod label is what admits them.
      expect(envoy.namespaceSelector).toEqual({});
      const labels = Object.entries<string>(envoy.podSelector.matchLabels ?? {});
      expect(labels.length).toBeGreaterThan(0);
      expect(envoy.podSelector.matchExpressions).toBeUndefined();
      for (const [k, v] of labels) {
        expect(README).toContain(`\`${k}: "${v}"\``);
        expect(README).toContain(`"${k}":"${v}"`);
      }
      expect({ http: peersOn(pod, ports.http), debug: peersOn(pod, ports.debug) }).toEqual({ http: [], debug: [] });
      expect(ports.metrics).toBeDefined();
      const prometheus = peersOn(pod, ports.metrics!);
      expect(prometheus.length).toBeGreaterThan(0);
      for (const peer of prometheus) {
        expect(peer).not.toBe(ANYONE);
        expect(Object.keys(peer.namespaceSelector?.matchLabels ?? {}).length).toBeGreaterThan(0);
        expect(Object.keys(peer.podSelector?.matchLabels ?? {}).length).toBeGreaterThan(0);
      }
    }
  });
});

describe('deploy/kubernetes: the Redis password', () => {
  test.each(PATTERN_CASES)('%s: Redis starts with --requirepass from a Secret, and every ratelimit container sends it as REDIS_AUTH', (_name, dir) => {
    const redis = podsOf(dir).filter(isRedisPod);
    expect(redis.length).toBe(1);
    const c = redis[0]!.spec.containers.find((x: Json) => x.name === 'redis');
    const argv: string[] = [...(c.command ?? []), ...(c.args ?? [])];
    const i = argv.indexOf('--requirepass');
    expect(i).toBeGreaterThanOrEqual(0);
    // Never a literal: a variable the kubelet fills from the Secret.
    const variable = /^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$/.exec(argv[i + 1] ?? '')?.[1];
    expect({ requirepass: argv[i + 1], fromVariable: variable !== undefined }).toEqual({ requirepass: argv[i + 1], fromVariable: true });
    const ref = envSecretRef(c, variable!);
    expect(ref).toEqual({ name: expect.any(String), key: expect.any(String), optional: false });
    // The Secret is a template of the pattern (never applied: see the kustomization test) ...
    expect(secretKeys(redis[0]!.file, ref!.name)).toContain(ref!.key);
    // ... and the README says how to create it.
    expect(README).toContain(`kubectl create secret generic ${ref!.name} --from-literal=${ref!.key}=`);

    const rl = RL.filter((x) => inDir(dir)(x.pod));
    expect(rl.length).toBeGreaterThan(0);
    for (const { c: rc, where } of rl) {
      expect({ where, REDIS_AUTH: envSecretRef(rc, 'REDIS_AUTH') }).toEqual({ where, REDIS_AUTH: ref });
      expect({ where, literal: containerEnv(rc).REDIS_AUTH }).toEqual({ where, literal: undefined });
    }
  });
});

describe('deploy/kubernetes: Redis memory', () => {
  /** `160mb`, `1gb`, `1048576` (bytes), as redis.conf reads a memory size (`mb` is 1024², `m` 10⁶). */
  const redisBytes = (v: string): number => {
    const m = /^(\d+)(b|k|kb|m|mb|g|gb)?$/i.exec(v);
    if (m === null) throw new Error(`not a Redis memory size: ${v}`);
    const unit = (m[2] ?? 'b').toLowerCase();
    const f: Record<string, number> = { b: 1, k: 1e3, kb: 1024, m: 1e6, mb: 1024 ** 2, g: 1e9, gb: 1024 ** 3 };
    return Number(m[1]) * f[unit]!;
  };
  /** A Kubernetes quantity in bytes (`256Mi`, `1Gi`, `500M`). */
  const k8sBytes = (v: string): number => {
    const m = /^(\d+)(Ki|Mi|Gi|K|M|G)?$/.exec(v);
    if (m === null) throw new Error(`not a Kubernetes memory quantity: ${v}`);
    const f: Record<string, number> = { '': 1, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, K: 1e3, M: 1e6, G: 1e9 };
    return Number(m[1]) * f[m[2] ?? '']!;
  };

  test.each(PATTERN_CASES)('%s: Redis never evicts counters (noeviction) and its maxmemory leaves the container limit room', (_name, dir) => {
    const redis = podsOf(dir).filter(isRedisPod);
    expect(redis.length).toBe(1);
    const c = redis[0]!.spec.containers.find((x: Json) => x.name === 'redis');
    const argv: string[] = [...(c.command ?? []), ...(c.args ?? [])];
    const policy = argv.indexOf('--maxmemory-policy');
    expect({ policy: argv[policy + 1] }).toEqual({ policy: 'noeviction' });
    // One policy only (a later one would win).
    expect(argv.filter((a) => a === '--maxmemory-policy')).toHaveLength(1);
    const max = argv.indexOf('--maxmemory');
    expect(max).toBeGreaterThanOrEqual(0);
    const maxmemory = redisBytes(argv[max + 1]!);
    const limit = k8sBytes(c.resources.limits.memory);
    // Room for fragmentation, client buffers and the process itself: the limit is at least 1.5 × maxmemory.
    expect(maxmemory).toBeGreaterThan(0);
    expect(limit).toBeGreaterThanOrEqual(1.5 * maxmemory);
  });

  test.each(RL.map((x) => [x.where, x]))('%s: keeps the eviction check on (REDIS_EVICTION_CHECK_INTERVAL is not 0)', (_w, { c }) => {
    expect(loadSettings(containerEnv(c)).redis.evictionCheckIntervalMs).toBeGreaterThan(0);
  });
});
