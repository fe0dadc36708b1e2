/**
 * A tiny authoritative DNS server on 127.0.0.1 (UDP, node:dgram) for tests: it answers SRV and A
 * questions from a table the test controls and may change at any time, NXDOMAIN for names it does
 * not know, and an empty NOERROR answer for a known name asked with another type. Only what a
 * resolver needs: one question per query, no compression in what it writes except the pointer
 * back to the question name, no EDNS, no TCP.
 */
import dgram from 'node:dgram';

export interface SrvRecord {
  target: string;
  port: number;
  priority?: number;
  weight?: number;
}

const TYPE_A = 1;
const TYPE_SRV = 33;
const CLASS_IN = 1;
const RCODE_FORMERR = 1;
const RCODE_NXDOMAIN = 3;
const RCODE_NOTIMP = 4;

function normalize(name: string): string {
  return name.toLowerCase().replace(/\.$/, '');
}

/** A name as DNS labels (`a.b` → 1 'a' 1 'b' 0). */
function encodeName(name: string): Buffer {
  const parts: Buffer[] = [];
  for (const label of normalize(name).split('.')) {
    if (label === '') continue;
    const b = Buffer.from(label, 'ascii');
    if (b.length > 63) throw new Error(`DNS label too long: ${label}`);
    parts.push(Buffer.from([b.length]), b);
  }
  parts.push(Buffer.from([0]));
  return Buffer.concat(parts);
}

/** Reads an uncompressed question name at `offset`; returns it and the offset after it. */
function readName(msg: Buffer, offset: number): { name: string; end: number } | undefined {
  const labels: string[] = [];
  let i = offset;
  for (;;) {
    if (i >= msg.length) return undefined;
    const len = msg[i]!;
    if (len === 0) return { name: labels.join('.'), end: i + 1 };
    if ((len & 0xc0) !== 0) return undefined; // questions are never compressed
    if (i + 1 + len > msg.length) return undefined;
    labels.push(msg.toString('ascii', i + 1, i + 1 + len));
    i += 1 + len;
  }
}

export class TestDnsServer {
  /** SRV records by name; change it (or use setSrv) while the server runs. */
  readonly srv = new Map<string, SrvRecord[]>();
  /** A records by name. */
  readonly a = new Map<string, string[]>();
  /** Questions answered so far, by `<TYPE> <name>`. */
  readonly queries: string[] = [];
  ttl = 1;

  private constructor(private readonly socket: dgram.Socket) {}

  static start(): Promise<TestDnsServer> {
    return new Promise((resolve, reject) => {
      const socket = dgram.createSocket('udp4');
      const server = new TestDnsServer(socket);
      socket.once('error', reject);
      socket.on('message', (msg, rinfo) => {
        const reply = server.answer(msg);
        if (reply !== undefined) socket.send(reply, rinfo.port, rinfo.address);
      });
      socket.bind(0, '127.0.0.1', () => {
        socket.removeListener('error', reject);
        socket.on('error', () => {});
        resolve(server);
      });
    });
  }

  get port(): number {
    return this.socket.address().port;
  }

  /** `127.0.0.1:<port>`, as `Resolver.setServers` takes it. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  setSrv(name: string, records: SrvRecord[]): void {
    this.srv.set(normalize(name), records);
  }

  setA(name: string, addresses: string[]): void {
    this.a.set(normalize(name), addresses);
  }

  /** Forgets a name: it answers NXDOMAIN from now on. */
  remove(name: string): void {
    this.srv.delete(normalize(name));
    this.a.delete(normalize(name));
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }

  /** The reply to one query, or undefined to drop it (not a query at all). */
  answer(msg: Buffer): Buffer | undefined {
    if (msg.length < 12) return undefined;
    const flags = msg.readUInt16BE(2);
    if ((flags & 0x8000) !== 0) return undefined; // a response, not a query
    const qdcount = msg.readUInt16BE(4);
    const opcode = (flags >> 11) & 0xf;
    const q = qdcount === 1 ? readName(msg, 12) : undefined;
    if (q === undefined || q.end + 4 > msg.length) return this.header(msg, flags, RCODE_FORMERR, 0, 0);
    const question = msg.subarray(12, q.end + 4);
    if (opcode !== 0) return Buffer.concat([this.header(msg, flags, RCODE_NOTIMP, 1, 0), question]);
    const qtype = msg.readUInt16BE(q.end);
    const qclass = msg.readUInt16BE(q.end + 2);
    const name = normalize(q.name);
    this.queries.push(`${qtype === TYPE_SRV ? 'SRV' : qtype === TYPE_A ? 'A' : String(qtype)} ${name}`);

    const known = this.srv.has(name) || this.a.has(name);
    if (!known || qclass !== CLASS_IN) {
      return Buffer.concat([this.header(msg, flags, RCODE_NXDOMAIN, 1, 0), question]);
    }
    const answers: Buffer[] = [];
    if (qtype === TYPE_SRV) {
      for (const r of this.srv.get(name) ?? []) {
        const target = encodeName(r.target);
        const rdata = Buffer.alloc(6 + target.length);
        rdata.writeUInt16BE(r.priority ?? 0, 0);
        rdata.writeUInt16BE(r.weight ?? 0, 2);
        rdata.writeUInt16BE(r.port, 4);
        target.copy(rdata, 6);
        answers.push(this.record(TYPE_SRV, rdata));
      }
    } else if (qtype === TYPE_A) {
      for (const ip of this.a.get(name) ?? []) {
        answers.push(this.record(TYPE_A, Buffer.from(ip.split('.').map(Number))));
      }
    }
    return Buffer.concat([this.header(msg, flags, 0, 1, answers.length), question, ...answers]);
  }

  private header(query: Buffer, qflags: number, rcode: number, qdcount: number, ancount: number): Buffer {
    const h = Buffer.alloc(12);
    query.copy(h, 0, 0, 2); // id
    // QR, the query's opcode and RD, AA, RA, rcode.
    h.writeUInt16BE(0x8000 | (qflags & 0x7900) | 0x0400 | 0x0080 | rcode, 2);
    h.writeUInt16BE(qdcount, 4);
    h.writeUInt16BE(ancount, 6);
    return h;
  }

  /** One answer whose owner is the question name (pointer to offset 12). */
  private record(type: number, rdata: Buffer): Buffer {
    const r = Buffer.alloc(12 + rdata.length);
    r.writeUInt16BE(0xc00c, 0);
    r.writeUInt16BE(type, 2);
    r.writeUInt16BE(CLASS_IN, 4);
    r.writeUInt32BE(this.ttl, 6);
    r.writeUInt16BE(rdata.length, 10);
    rdata.copy(r, 12);
    return r;
  }
}
