#!/usr/bin/env bash
# Benchmark suite entry point (`make bench` builds first, then runs this). Installs the load
# generators when missing (h2load from nghttp2-client, wrk, Go and grpc-go for bench/openloop and bench/go-rls), then runs bench/run.js, which writes
# bench/results/latest.{json,md}. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v h2load >/dev/null 2>&1 || missing+=(nghttp2-client)
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
# bench/openloop (the half-load generator for gRPC) and bench/go-rls (the Go service measured beside
# ours) are built with Go and Debian's grpc-go sources.
command -v go >/dev/null 2>&1 || missing+=(golang-go)
[[ -d /usr/share/gocode/src/google.golang.org/grpc ]] || missing+=(golang-google-grpc-dev)
if ((${#missing[@]})); then
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  if command -v apt-get >/dev/null 2>&1 &&
    "${sudo[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    echo "bench: installed ${missing[*]}" >&2
  else
    echo "bench: could not install ${missing[*]}; the Node fallback load generator will be used and labelled" >&2
  fi
fi

if [[ ! -f dist/src/cli/ratelimit.js ]]; then
  echo "bench: dist/ is missing; run 'make bench' (it builds first) or 'make build'" >&2
  exit 2
fi

exec node bench/run.js
