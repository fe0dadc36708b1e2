/**
 * Who a request comes from, as the counter store sees it (src/core/store.ts Caller): the peer
 * address of its connection, without the port, so that a client's connections share one budget
 * of new counters. Made once per connection, so a request allocates nothing for it. A Unix socket
 * has no peer address, hence no caller (and no such budget): its peer is on the same machine.
 */
import type net from 'node:net';
import { Caller } from '../core/store';

const bySocket = new WeakMap<net.Socket, Caller | null>();

/** The caller of the requests on `socket` (undefined on a Unix socket). */
export function socketCaller(socket: net.Socket): Caller | undefined {
  let caller = bySocket.get(socket);
  if (caller === undefined) {
    const address = socket.remoteAddress;
    caller = address !== undefined && address !== '' ? new Caller(address) : null;
    bySocket.set(socket, caller);
  }
  return caller ?? undefined;
}

/** Callers of grpc-js peers kept at most; the cache starts over past it. */
const MAX_PEERS = 16_384;
const byPeer = new Map<string, Caller>();

/**
 * The caller of a grpc-js call from its `getPeer()` text (`address:port`, IPv6 without brackets;
 * `unknown` without an address). grpc-js makes that text anew for each call: this transport is
 * not the fast path.
 */
export function peerCaller(peer: string): Caller | undefined {
  const colon = peer.lastIndexOf(':');
  if (colon <= 0) return undefined;
  const address = peer.slice(0, colon);
  let caller = byPeer.get(address);
  if (caller === undefined) {
    if (byPeer.size >= MAX_PEERS) byPeer.clear();
    caller = new Caller(address);
    byPeer.set(address, caller);
  }
  return caller;
}
