#!/usr/bin/env bash
# Makes sure the servers the integration tests start are installed: redis-server, redis-sentinel
# and redis-cli, memcached, openssl (test certificates); and the clients of the HTTP/2 interop
# test (test/server/h2-interop.test.ts): python3-grpcio (the C-core client, imported by
# /usr/bin/python3), golang-go with golang-google-grpc-dev (grpc-go sources under /usr/share/gocode)
# and nghttp2-client (h2load, nghttp); and the clients of the HTTP/1.1 interop test
# (test/server/http-interop.test.ts): curl and wrk; and prometheus with promtool (the alert rules
# and the dashboard's queries, test/deploy/observability.test.ts); and chromium (the debug port's
# console in a real browser, test/server/console.test.ts). Missing ones are installed with apt-get when running as root
# on Debian/Ubuntu (as CI does); otherwise this stops at once with the exact command to run, since
# a test that cannot start its server or client would fail anyway.
#
# TEST_SERVERS_PYTHON (default /usr/bin/python3) and TEST_SERVERS_GRPC_GO_DIR (default
# /usr/share/gocode/src/google.golang.org/grpc) name what is checked instead, for
# test/scripts/test-servers.test.ts.
set -euo pipefail

python=${TEST_SERVERS_PYTHON:-/usr/bin/python3}
grpc_go_dir=${TEST_SERVERS_GRPC_GO_DIR:-/usr/share/gocode/src/google.golang.org/grpc}

declare -A package_of=(
  [redis-server]=redis-server
  [redis-sentinel]=redis-sentinel
  [redis-cli]=redis-tools
  [memcached]=memcached
  [openssl]=openssl
  [go]=golang-go
  [h2load]=nghttp2-client
  [nghttp]=nghttp2-client
  [curl]=curl
  [wrk]=wrk
  [prometheus]=prometheus
  [promtool]=prometheus
  [chromium]=chromium
)
missing=()
# Adds a package to the missing ones, once (h2load and nghttp come in the same package).
need() {
  case " ${missing[*]-} " in *" $1 "*) ;; *) missing+=("$1") ;; esac
}
for cmd in redis-server redis-sentinel redis-cli memcached openssl; do
  command -v "$cmd" >/dev/null 2>&1 || need "${package_of[$cmd]}"
done
"$python" -c 'import grpc' >/dev/null 2>&1 || need python3-grpcio
command -v go >/dev/null 2>&1 || need "${package_of[go]}"
[ -d "$grpc_go_dir" ] || need golang-google-grpc-dev
for cmd in h2load nghttp curl wrk prometheus promtool chromium; do
  command -v "$cmd" >/dev/null 2>&1 || need "${package_of[$cmd]}"
done
[ ${#missing[@]} -eq 0 ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing the test servers and clients: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    exit 0
  fi
  echo "The tests need servers and clients that are not installed: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
elif command -v brew >/dev/null 2>&1; then
  echo "The tests need servers and clients that are not installed: ${missing[*]}. Install them with:" >&2
  echo "  brew install redis memcached openssl go nghttp2 curl wrk prometheus chromium" >&2
  echo "  $python -m pip install grpcio" >&2
  echo "The grpc-go interop client builds against Debian's golang-google-grpc-dev sources ($grpc_go_dir): run that test on Debian or Ubuntu." >&2
else
  echo "The tests need these commands on the PATH: redis-server, redis-sentinel, redis-cli, memcached, openssl, go, h2load, nghttp, curl, wrk, prometheus, promtool, chromium;" \
    "$python with the grpc module; the grpc-go sources in $grpc_go_dir (missing: ${missing[*]})." >&2
fi
exit 1
