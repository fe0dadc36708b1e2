/**
 * Server TLS: certificate files that reload without a restart (a change in their directory,
 * as cert-manager's symlink swaps make, reloads at once; a periodic re-read catches the rest),
 * gRPC credentials built on them, and upstream's GRPC_CLIENT_TLS_SAN check (the client
 * certificate must carry that DNS name and allow client authentication).
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../telemetry/logger';
import { type Admission, type ListenerAdmission, refuseBeforeSocket } from './admission';
import type { ByteBudget } from './byte-budget';
import { DirectoryWatcher } from '../platform/directory-watcher';
import { errorMessage } from '../platform/errors';

export interface ServerTlsFiles {
  certFile: string;
  keyFile: string;
  /** When set, client certificates are required and verified against it. */
  clientCaFile: string;
  /** When set, the client certificate must carry this DNS SAN and client-auth usage. */
  clientSan: string;
  reloadIntervalMs: number;
}

export interface TlsMaterial {
  cert: Buffer;
  key: Buffer;
  ca: Buffer | undefined;
}

type CaListener = (update: { caCertificate: Buffer } | null) => void;
type IdentityListener = (update: { certificate: Buffer; privateKey: Buffer } | null) => void;

/** OID of the client-authentication extended key usage. */
const CLIENT_AUTH_OID = '1.3.6.1.5.5.7.3.2';

/**
 * The certificate files, read now and again on change. Implements grpc-js's CertificateProvider
 * (identity and CA) and lets HTTPS servers subscribe too.
 */
export class CertificateSource {
  private material: TlsMaterial;
  private readonly caListeners = new Set<CaListener>();
  private readonly identityListeners = new Set<IdentityListener>();
  private readonly subscribers = new Set<(m: TlsMaterial) => void>();
  private readonly watcher: DirectoryWatcher;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly files: ServerTlsFiles,
    private readonly logger: Logger,
  ) {
    this.material = this.read();
    this.watcher = new DirectoryWatcher({ onChange: () => this.reload(), logger, logPrefix: 'certificates: ' });
  }

  get current(): TlsMaterial {
    return this.material;
  }

  /** Starts watching the files' directories and re-reading them every reloadIntervalMs. */
  start(): void {
    const dirs = new Set([this.files.certFile, this.files.keyFile, this.files.clientCaFile].filter((f) => f !== '').map((f) => path.dirname(f)));
    for (const dir of dirs) this.watcher.watch(dir);
    if (this.files.reloadIntervalMs > 0) {
      this.timer = setInterval(() => this.reload(), this.files.reloadIntervalMs);
      this.timer.unref();
    }
  }

  stop(): void {
    this.watcher.close();
    clearInterval(this.timer);
  }

  subscribe(listener: (m: TlsMaterial) => void): void {
    this.subscribers.add(listener);
  }

  /** Re-reads the files; a changed, valid set is pushed to every listener. */
  reload(): void {
    let next: TlsMaterial;
    try {
      next = this.read();
    } catch (err) {
      // A half-written rotation: keep serving the previous certificate.
      this.logger.warn(`certificate reload failed, keeping the current certificate: ${errorMessage(err)}`);
      return;
    }
    const cur = this.material;
    if (next.cert.equals(cur.cert) && next.key.equals(cur.key) && equalBuffers(next.ca, cur.ca)) return;
    this.material = next;
    this.logger.info(`TLS certificates reloaded from ${this.files.certFile}`);
    for (const l of this.identityListeners) l({ certificate: next.cert, privateKey: next.key });
    if (next.ca !== undefined) for (const l of this.caListeners) l({ caCertificate: next.ca });
    for (const s of this.subscribers) s(next);
  }

  // The first update is delivered on a later tick, as grpc-js's own providers do: delivered
  // synchronously, grpc-js builds its server before it knows the protocols (no ALPN h2).
  addCaCertificateListener(l: CaListener): void {
    this.caListeners.add(l);
    setImmediate(() => {
      if (this.caListeners.has(l)) l(this.material.ca === undefined ? null : { caCertificate: this.material.ca });
    });
  }
  removeCaCertificateListener(l: CaListener): void {
    this.caListeners.delete(l);
  }
  addIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.add(l);
    setImmediate(() => {
      if (this.identityListeners.has(l)) l({ certificate: this.material.cert, privateKey: this.material.key });
    });
  }
  removeIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.delete(l);
  }

  private read(): TlsMaterial {
    const { certFile, keyFile, clientCaFile } = this.files;
    const cert = readPem(certFile, 'GRPC_SERVER_TLS_CERT');
    const key = readPem(keyFile, 'GRPC_SERVER_TLS_KEY');
    const ca = clientCaFile === '' ? undefined : readPem(clientCaFile, 'GRPC_CLIENT_TLS_CACERT');
    // Fails early on a key that does not match its certificate.
    tls.createSecureContext({ cert, key, ca });
    return { cert, key, ca };
  }
}

function readPem(file: string, variable: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (err) {
    throw new Error(`${variable}: cannot read ${file}: ${errorMessage(err)}`);
  }
}

function equalBuffers(a: Buffer | undefined, b: Buffer | undefined): boolean {
  return a === undefined ? b === undefined : b !== undefined && a.equals(b);
}

/** gRPC server credentials on the (reloading) source; client certificates required with a CA. */
export function grpcServerCredentials(source: CertificateSource): grpc.ServerCredentials {
  const withCa = source.files.clientCaFile !== '';
  return grpc.experimental.createCertificateProviderServerCredentials(source, withCa ? source : null, withCa);
}

/** Options for https.createServer from the current material. */
export function httpsOptions(m: TlsMaterial): tls.TlsOptions {
  return { cert: m.cert, key: m.key, ca: m.ca, requestCert: m.ca !== undefined, rejectUnauthorized: m.ca !== undefined };
}

/** Go's x509 host matching for a DNS SAN: exact (case-insensitive) or a leftmost `*` label. */
export function dnsNameMatches(pattern: string, name: string): boolean {
  const p = pattern.toLowerCase();
  const n = name.toLowerCase();
  if (p === n) return true;
  if (!p.startsWith('*.')) return false;
  const dot = n.indexOf('.');
  return dot > 0 && n.slice(dot) === p.slice(1);
}

/**
 * Why a verified client certificate fails the GRPC_CLIENT_TLS_SAN rule, or undefined when it
 * passes: it must carry `san` as a DNS SAN and, if it lists extended key usages, client auth.
 */
export function clientCertificateProblem(cert: tls.PeerCertificate | tls.DetailedPeerCertificate, san: string): string | undefined {
  if (cert === undefined || cert === null || Object.keys(cert).length === 0) return 'no client certificate';
  const names = (cert.subjectaltname ?? '')
    .split(', ')
    .filter((e) => e.startsWith('DNS:'))
    .map((e) => e.slice(4));
  if (!names.some((n) => dnsNameMatches(n, san))) {
    return `client certificate SANs [${names.join(', ')}] do not include ${san}`;
  }
  const eku = (cert as { ext_key_usage?: string[] }).ext_key_usage;
  if (eku !== undefined && eku.length > 0 && !eku.includes(CLIENT_AUTH_OID)) {
    return 'client certificate does not allow client authentication (extended key usage)';
  }
  return undefined;
}

/** Closes TLS connections whose client certificate fails the SAN rule, right after the handshake. */
export function enforceClientSan(server: tls.Server, san: string, logger: Logger): void {
  server.on('secureConnection', (socket: tls.TLSSocket) => {
    const problem = clientCertificateProblem(socket.getPeerCertificate(), san);
    if (problem !== undefined) {
      logger.warn(`refused a TLS client from ${socket.remoteAddress ?? '?'}: ${problem}`);
      socket.destroy();
    }
  });
}

/**
 * The listening servers a bound grpc-js server made (a private field): grpc-js gives no hook for
 * a handshake check or a connection cap. Throws when they cannot be found, naming `what` needed
 * them: such a setting must never be skipped silently.
 */
export function grpcJsListeners(server: grpc.Server, what: string): net.Server[] {
  const servers = (server as unknown as { http2Servers?: Map<net.Server, unknown> }).http2Servers;
  if (!(servers instanceof Map) || servers.size === 0) throw new Error(`${what}: cannot reach the listeners of the grpc-js server`);
  return [...servers.keys()];
}

/** The SAN rule on the HTTP/2 servers grpc-js created. */
export function enforceClientSanOnGrpc(server: grpc.Server, san: string, logger: Logger): void {
  for (const s of grpcJsListeners(server, 'GRPC_CLIENT_TLS_SAN')) enforceClientSan(s as tls.Server, san, logger);
}

/**
 * A server for our own protocol handlers on each socket: plain, or TLS on the reloading
 * `certs` with ALPN `protocol` and the GRPC_CLIENT_TLS_SAN check when `clientSan` is set. A
 * client that chose another protocol is closed, and so is one that chose none when
 * `protocolRequired` (HTTP/2 over TLS needs ALPN; HTTP/1.1 clients often send none).
 * Every socket goes through `admission` as it is accepted, before its TLS handshake (which the
 * admission's handshake bound then covers); `serve` gets each usable connection with its admission.
 */
export function socketServer(
  serve: (socket: net.Socket, admitted: Admission) => void,
  admission: ListenerAdmission,
  tlsOptions: { certs: CertificateSource; protocol: string; protocolRequired: boolean; clientSan: string; logger: Logger } | undefined,
  allowHalfOpen = false,
  /** What holds the bytes of a ClientHello still arriving (the process's request budget). */
  budget?: ByteBudget,
): net.Server {
  if (tlsOptions === undefined) {
    const plain = net.createServer({ allowHalfOpen }, (socket) => {
      const admitted = admission.accept(socket);
      if (admitted !== undefined) serve(socket, admitted);
    });
    refuseBeforeSocket(plain, admission);
    return plain;
  }
  const { certs, protocol, protocolRequired, clientSan, logger } = tlsOptions;
  // Never listens: the plain server below hands it each connection once its ClientHello is in.
  const secure = tls.createServer({
    ...httpsOptions(certs.current),
    ALPNProtocols: [protocol],
    allowHalfOpen,
    handshakeTimeout: tlsHandshakeBackstop(admission.limits.handshakeTimeoutMs),
  });
  certs.subscribe((m) => secure.setSecureContext(httpsOptions(m)));
  const server = net.createServer({ allowHalfOpen }, (socket) => {
    // A unix socket has no address to tell its TLS socket by: admitted once secure.
    const admitted = socket.remotePort === undefined ? undefined : admission.accept(socket, true);
    if (socket.remotePort !== undefined && admitted === undefined) return;
    // The TLS socket, with OpenSSL's state and buffers (some 15 KB, 50 KB once a ClientHello is
    // under way, and more again when a dropped one is read), is made once the first TLS record
    // (the ClientHello) has arrived whole: until then a connection that sends nothing, or only
    // part of it, holds a plain socket and the bytes it sent.
    awaitFirstRecord(socket, budget, () => admitted?.exceeded('request_bytes'), () => {
      if (admitted !== undefined) admission.tlsBegun(admitted);
      if (!socket.destroyed) secure.emit('connection', socket);
    });
  });
  refuseBeforeSocket(server, admission);
  // The SAN check runs first: a refused client never gets a connection.
  if (clientSan !== '') enforceClientSan(secure, clientSan, logger);
  secure.on('secureConnection', (socket: tls.TLSSocket) => {
    if (socket.destroyed) return;
    const admitted = socket.remotePort === undefined ? admission.accept(socket) : admission.secured(socket);
    if (admitted === undefined) {
      socket.destroy();
      return;
    }
    const chosen = socket.alpnProtocol;
    if (chosen === protocol || (chosen === false && !protocolRequired)) serve(socket, admitted);
    else admitted.shed('no ALPN');
  });
  // A failed handshake (or one past node's own bound) or a reset socket is the client's problem,
  // not the server's; node leaves closing the socket to this listener.
  secure.on('tlsClientError', (_err: Error, socket: tls.TLSSocket) => socket.destroy());
  return server;
}

/** The largest TLS record (RFC 8446 5.1: 2^14 bytes of payload, plus the expansion TLS 1.2 allows) with its header. */
const MAX_FIRST_RECORD = 5 + (1 << 14) + 2048;

/**
 * Calls `whole` once the first TLS record on `socket` has arrived (its 5-byte header says how
 * long it is), with those bytes put back to be read again; a client that closes first is closed.
 * What is not a TLS handshake record, or declares more than a record may hold, is handed on at
 * once: OpenSSL refuses it. The bytes held meanwhile come out of `budget` (REQUEST_MAX_BUFFERED_BYTES):
 * a connection the budget cannot hold is closed.
 */
function awaitFirstRecord(socket: net.Socket, budget: ByteBudget | undefined, onBudget: () => void, whole: () => void): void {
  const chunks: Buffer[] = [];
  let have = 0;
  /** The byte at `i` of what arrived, across the chunks. */
  const byteAt = (i: number): number => {
    for (const c of chunks) {
      if (i < c.length) return c[i]!;
      i -= c.length;
    }
    return -1;
  };
  const settle = (): void => {
    socket.off('data', onData);
    socket.off('end', onEnd);
    socket.off('close', onEnd);
    budget?.give(have);
  };
  const onData = (chunk: Buffer): void => {
    if (budget !== undefined && !budget.tryTake(chunk.length)) {
      settle();
      onBudget();
      socket.destroy();
      return;
    }
    chunks.push(chunk);
    have += chunk.length;
    const handshake = byteAt(0) === 0x16;
    if (handshake && have < 5) return;
    const need = handshake ? 5 + ((byteAt(3) << 8) | byteAt(4)) : 0;
    if (have < need && need <= MAX_FIRST_RECORD) return;
    settle();
    socket.pause();
    socket.unshift(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, have));
    whole();
  };
  const onEnd = (): void => {
    settle();
    socket.destroy();
  };
  socket.on('data', onData);
  socket.once('end', onEnd);
  socket.once('close', onEnd);
}

/**
 * node's own TLS handshake bound: twice admission's (which applies first, from the sweep), so that
 * it only acts where admission cannot tell a TLS socket by its address (a unix socket). node reads
 * 0 as its default of 120 s.
 */
export function tlsHandshakeBackstop(handshakeTimeoutMs: number): number {
  return handshakeTimeoutMs > 0 ? 2 * handshakeTimeoutMs : 0;
}
