/**
 * One pipeline written to an ioredis connection (single, sentinel, or a cluster node's) as one
 * RESP text, its replies collected without a Command object and a promise per command. ioredis's
 * pipeline builds a Command (with its promise, argument list and encoder) per INCRBY and per
 * EXPIRE and settles each; with five descriptors that was the service's largest cost, and most of
 * what it allocated.
 *
 * The bytes on the wire are what ioredis's pipeline writes (lower-case names, the same
 * arguments, one write per pipeline). ioredis still owns the connection: its reply parser, its
 * queue of pending replies, reconnection and sentinel failover. The pipeline is handed to it
 * through its public `sendCommand(command, stream)`, once per command, with the one
 * `WirePipeline` standing for each of them: ioredis queues it once per command, writes what the
 * command's `toWritable` gives (nothing) to the stream given (one whose `write` does nothing) and
 * hands it the replies in order, and an error per pending command when the connection is lost;
 * the text is then written once to the connection's public `stream`. What this relies on of a
 * Command (`name`, `resolve`, `reject`, `toWritable`, `isTraced`, `args`) is tested in
 * test/backends/redis/wire.test.ts against a real Redis, so an ioredis release in the range of
 * package.json that changed it fails there before it ships.
 */
import type Redis from 'ioredis';

const CRLF = '\r\n';

/**
 * One pipeline: its commands as RESP text, appended one at a time, then `send` hands it to ioredis
 * and collects the replies. For ioredis it stands for each of its commands in turn: `resolve` /
 * `reject` are called once per command, in order (a reply, an error reply, or the connection's
 * failure), and `onDone` gets all replies (an Error for a failed command) after the last.
 */
export class WirePipeline {
  /** For ioredis's flag checks (not a subscriber, blocking, select or quit command). */
  readonly name = 'incrby';
  /** Tells ioredis not to trace it as a command of its own. */
  readonly isTraced = true;
  text = '';
  commands = 0;
  private replies: unknown[] = [];
  private received = 0;
  private onDone: ((replies: unknown[]) => void) | undefined;

  /** `INCRBY key addend` then `EXPIRE key ttl` (upstream's pair for one descriptor). */
  incrbyExpire(key: string, addend: number, ttl: number): void {
    const k = '$' + Buffer.byteLength(key) + CRLF + key + CRLF;
    const a = String(addend);
    const t = String(ttl);
    this.text +=
      '*3\r\n$6\r\nincrby\r\n' + k + '$' + a.length + CRLF + a + CRLF + '*3\r\n$6\r\nexpire\r\n' + k + '$' + t.length + CRLF + t + CRLF;
    this.commands += 2;
  }

  /** Any command; `name` is lower-case ASCII, as ioredis sends it. */
  command(name: string, args: ReadonlyArray<string | number>): void {
    let s = '*' + (args.length + 1) + CRLF + '$' + name.length + CRLF + name + CRLF;
    for (let i = 0; i < args.length; i++) {
      const a = String(args[i]);
      s += '$' + Buffer.byteLength(a) + CRLF + a + CRLF;
    }
    this.text += s;
    this.commands++;
  }

  /**
   * Queues one reply per command on `redis` and writes the text in one write. When the connection
   * cannot take commands now, ioredis rejects each at once (no offline queue) and nothing is
   * written: `onDone` has run before this returns. A cluster node's connection has an offline
   * queue (ioredis sets it): send to it only when it can write (connection.ts `canWrite`).
   */
  send(redis: Redis, onDone: (replies: unknown[]) => void): void {
    this.onDone = onDone;
    this.replies = new Array<unknown>(this.commands);
    const sendCommand = redis.sendCommand as (command: unknown, stream: unknown) => unknown;
    for (let i = 0; i < this.commands; i++) sendCommand.call(redis, this, COLLECTOR);
    if (this.received === 0) redis.stream.write(this.text);
  }

  /** ioredis adds the failed command's arguments to a reply error; there are none to name. */
  get args(): string[] {
    return [];
  }

  resolve(reply: unknown): void {
    this.take(reply);
  }

  reject(err: unknown): void {
    this.take(err instanceof Error ? err : new Error(String(err)));
  }

  /** Nothing: the pipeline's text is written once, by `send`. */
  toWritable(): string {
    return '';
  }

  private take(reply: unknown): void {
    if (this.received === this.commands) return;
    this.replies[this.received++] = reply;
    if (this.received === this.commands) this.onDone!(this.replies);
  }
}

/** The stream `sendCommand` writes each command's (empty) text to: the text is written by `send`. */
const COLLECTOR = { writable: true, write: (): boolean => true };
