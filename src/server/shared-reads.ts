/**
 * Socket reads into one buffer shared by every plain connection of the process. By default each
 * read of each socket is a new buffer, and a buffer the connection has handled stays in memory
 * until V8 collects it: 400 connections sending what their windows allow left 108-137 MiB of
 * handled reads waiting for a collection (bench/README.md, "Attacks"). With one shared buffer a
 * read allocates nothing; what a connection must keep past the read (an unfinished frame or
 * request, a body still arriving) it copies, as nghttp2 and Go's net/http2 copy out of their
 * read buffers. A read is handled before the next one is made (one thread), so one buffer serves
 * every socket.
 *
 * Node offers this (`onread`) only for sockets it constructs, not for the ones a server accepts:
 * an accepted connection's handle, still paused, moves into a socket made with `onread`. TLS
 * sockets read through their own layer and keep Node's reads.
 */
import net from 'node:net';

/** A read, valid only until the listener returns: copy what must outlive it. */
export type ReadListener = (chunk: Buffer) => void;

/** libuv's read size: a read never needs more. */
const READ_BUFFER_BYTES = 64 * 1024;
let shared: Buffer | undefined;

/** The listener of each socket made here; a socket not in it reads the ordinary way. */
const sharedReaders = new WeakMap<net.Socket, { listener: ReadListener | undefined }>();

/** Each accepted socket whose connection moved, and the socket it moved to. */
const movedTo = new WeakMap<net.Socket, net.Socket>();

/** What the accepted socket carries that Node keeps private (`_handle`) or sets on accept (`_server`, `server`). */
interface AcceptedInternals {
  _handle: unknown;
  _server: net.Server | null;
  server: net.Server | null;
}

/**
 * A plain server whose connections read into the shared buffer; `serve` gets each one and reads
 * it with {@link onReads}.
 */
export function sharedReadServer(serve: (socket: net.Socket) => void, allowHalfOpen: boolean): net.Server {
  const server: net.Server = net.createServer({ allowHalfOpen, pauseOnConnect: true }, (accepted) =>
    serve(moveToSharedReads(accepted, server, allowHalfOpen)),
  );
  return server;
}

function moveToSharedReads(accepted: net.Socket, server: net.Server, allowHalfOpen: boolean): net.Socket {
  const old = accepted as unknown as AcceptedInternals;
  const handle = old._handle;
  // Closed already (reset before the accept was handled): nothing to move.
  if (handle === null || handle === undefined) return accepted;
  old._handle = null;
  const reader: { listener: ReadListener | undefined } = { listener: undefined };
  const buffer = (shared ??= Buffer.allocUnsafe(READ_BUFFER_BYTES));
  const socket = new net.Socket({
    handle,
    allowHalfOpen,
    readable: true,
    writable: true,
    pauseOnCreate: true,
    onread: {
      buffer,
      callback: (n: number, buf: Uint8Array) => {
        reader.listener?.(Buffer.from(buf.buffer, buf.byteOffset, n));
        return true;
      },
    },
  } as net.SocketConstructorOpts);
  sharedReaders.set(socket, reader);
  movedTo.set(accepted, socket);
  // The server counts its connections through these: the new socket's close is the one counted.
  const moved = socket as unknown as AcceptedInternals;
  moved._server = server;
  moved.server = server;
  return socket;
}

/**
 * Reads `socket`: each read to `listener`, from now on. For a socket of {@link sharedReadServer}
 * the chunk is a view of the shared buffer; for any other it is Node's own read, but the rule is
 * the same for both: copy what must outlive the call.
 */
export function onReads(socket: net.Socket, listener: ReadListener): void {
  const reader = sharedReaders.get(socket);
  if (reader === undefined) {
    socket.on('data', listener);
    return;
  }
  reader.listener = listener;
  // Flowing, so that the end of the input is seen ('end'); the reads come through `onread`.
  socket.resume();
}

/** The socket that serves the connection `accepted` (the server's 'connection' event) came with: itself, or the one it moved to. */
export function servingSocket(accepted: net.Socket): net.Socket {
  return movedTo.get(accepted) ?? accepted;
}
