#!/usr/bin/python3
"""
A gRPC client on the C core (Debian's python3-grpcio) for test/server/h2-interop.test.ts: it
checks that our HTTP/2 server (src/server/h2) serves clients other than grpc-js. No generated
code: requests and responses are raw message bytes, in hex.

Usage: client.py HOST:PORT < calls.json, where calls.json is
  {"concurrency": 1, "calls": [{"method": "/pkg.Service/Method", "request": "<hex>",
                                "timeoutMs": 5000, "metadata": [["key", "value"]]}]}
All calls share one channel; up to `concurrency` of them are in flight at once (default 1: one
after another). Prints one JSON line per call, in the order of the calls:
  {"code": 0, "details": "", "response": "<hex>", "trailers": [["key", "value"]]}
"""
import json
import sys

import grpc


def outcome(future):
    """The call's status, details, response bytes and trailing metadata, whether it failed or not."""
    try:
        response = future.result()
    except grpc.RpcError:
        response = None
    return {
        'code': future.code().value[0],
        'details': future.details() or '',
        'response': response.hex() if response is not None else None,
        'trailers': [[k, v if isinstance(v, str) else v.hex()] for k, v in (future.trailing_metadata() or ())],
    }


def main():
    target = sys.argv[1]
    spec = json.load(sys.stdin)
    concurrency = max(1, spec.get('concurrency', 1))
    # Straight to the test server, whatever proxy the environment names.
    with grpc.insecure_channel(target, options=[('grpc.enable_http_proxy', 0)]) as channel:
        in_flight = []
        for call in spec['calls']:
            # No serializers: the call sends and returns bytes as they are.
            method = channel.unary_unary(call['method'], request_serializer=None, response_deserializer=None)
            metadata = [tuple(pair) for pair in call.get('metadata', [])]
            timeout = call.get('timeoutMs', 10000) / 1000
            in_flight.append(method.future(bytes.fromhex(call['request']), timeout=timeout, metadata=metadata))
            if len(in_flight) >= concurrency:
                print(json.dumps(outcome(in_flight.pop(0))), flush=True)
        for future in in_flight:
            print(json.dumps(outcome(future)), flush=True)


if __name__ == '__main__':
    main()
