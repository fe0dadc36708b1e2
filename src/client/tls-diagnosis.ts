/**
 * Why a TLS connection to the service fails, in words. grpc-js reports a refused client
 * certificate as "No connection established" (over TLS 1.3 the server checks the certificate after
 * the client's handshake is done, or, for GRPC_CLIENT_TLS_SAN, closes the connection without an
 * alert), so a command line that got UNAVAILABLE opens one connection of its own with the same
 * files and reports what happened to it: the server's TLS alert, the server certificate that did
 * not verify, or a server that hung up right after the handshake.
 */
import tls from 'node:tls';
import net from 'node:net';

export interface TlsFiles {
  /** CA that verifies the server; undefined: the system CAs. */
  readonly ca?: Buffer | undefined;
  readonly cert?: Buffer | undefined;
  readonly key?: Buffer | undefined;
  /** The name to verify in the server certificate; '' or undefined: the dial host. */
  readonly serverName?: string | undefined;
}

/** The HTTP/2 client preface: a server that accepted the certificate answers it. */
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');

const REFUSED_CERTIFICATE = 'the server refused the client certificate';

/**
 * What fails in TLS between this client and `dial` (`host:port`, `[v6]:port` or `dns:///host:port`),
 * or undefined when TLS is not the problem: the TCP connection itself fails, the server answers
 * (the certificates are fine), the address has another form, or `timeoutMs` passes.
 */
export function diagnoseTls(dial: string, files: TlsFiles, timeoutMs: number): Promise<string | undefined> {
  const m = /^(?:dns:\/\/\/)?(?:\[([^\]]+)\]|([^:/[\]]+)):(\d+)$/.exec(dial);
  if (m === null) return Promise.resolve(undefined);
  const host = m[1] ?? m[2]!;
  const serverName = files.serverName !== undefined && files.serverName !== '' ? files.serverName : host;
  return new Promise((resolve) => {
    let handshakeDone = false;
    let settled = false;
    const socket = tls.connect({
      host,
      port: Number(m[3]),
      // SNI takes no IP address; the certificate is then checked against the address itself.
      ...(net.isIP(serverName) === 0 ? { servername: serverName } : {}),
      ca: files.ca,
      cert: files.cert,
      key: files.key,
      ALPNProtocols: ['h2'],
    });
    const done = (problem: string | undefined): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(problem);
    };
    const timer = setTimeout(() => done(undefined), timeoutMs);
    socket.once('secureConnect', () => {
      handshakeDone = true;
      socket.write(PREFACE);
    });
    socket.once('data', () => done(undefined));
    socket.once('error', (err: NodeJS.ErrnoException) => done(explain(err)));
    socket.once('close', () =>
      done(
        handshakeDone
          ? `${REFUSED_CERTIFICATE}: it closed the connection right after the TLS handshake (a certificate from a CA it does not trust, or without the SAN it requires; the server's log says which)`
          : undefined,
      ),
    );
  });
}

function explain(err: NodeJS.ErrnoException): string | undefined {
  // connect, getaddrinfo…: no TLS spoken yet; the gRPC error already names the cause.
  if (err.syscall === 'connect' || err.syscall === 'getaddrinfo') return undefined;
  const code = err.code ?? '';
  const alert = /^ERR_SSL_(?:SSLV3|TLSV1|TLSV13)_ALERT_(\w+)$/.exec(code)?.[1];
  if (alert !== undefined) {
    const words = alert.toLowerCase().replace(/_/g, ' ');
    if (alert === 'CERTIFICATE_REQUIRED') return `the server requires a client certificate (TLS alert "${words}"): give -grpc-cert-file and -grpc-key-file`;
    if (/CERTIFICATE|UNKNOWN_CA|ACCESS_DENIED/.test(alert)) return `${REFUSED_CERTIFICATE} (TLS alert "${words}")`;
    return `the server ended the TLS handshake (TLS alert "${words}")`;
  }
  if (code.startsWith('ERR_SSL_') || err.syscall !== undefined) return `the TLS handshake failed: ${code !== '' ? code : err.message}`;
  // Node's checks of the server certificate: chain (SELF_SIGNED_CERT_IN_CHAIN…) and name (ERR_TLS_CERT_ALTNAME_INVALID).
  return `the server certificate did not verify: ${err.message} (-grpc-server-ca-file, -grpc-server-name)`;
}

/**
 * Whether `dial` answers a TLS handshake: for a plaintext call that got UNAVAILABLE, a service
 * that speaks TLS is the likely reason (grpc-js says only "Failed to connect"). A TLS alert counts
 * as speaking TLS; a server that is not TLS answers the ClientHello with something else.
 */
export function speaksTls(dial: string, timeoutMs: number): Promise<boolean> {
  const m = /^(?:dns:\/\/\/)?(?:\[([^\]]+)\]|([^:/[\]]+)):(\d+)$/.exec(dial);
  if (m === null) return Promise.resolve(false);
  return new Promise((resolve) => {
    let settled = false;
    // Only to see whether TLS is spoken: nothing is sent after the handshake, nothing trusted.
    const socket = tls.connect({ host: m[1] ?? m[2]!, port: Number(m[3]), rejectUnauthorized: false, ALPNProtocols: ['h2'] });
    const done = (yes: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(yes);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once('secureConnect', () => done(true));
    socket.once('error', (err: NodeJS.ErrnoException) => done(/_ALERT_/.test(err.code ?? '')));
    socket.once('close', () => done(false));
  });
}
