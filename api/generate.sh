#!/usr/bin/env bash
# Regenerates the TypeScript protocol code from the .proto sources in api/.
#
#   bash api/generate.sh [OUT_DIR]
#
# Writes OUT_DIR/generated/ (OUT_DIR defaults to the repository root), after
# deleting any previous OUT_DIR/generated/ so that no stale file survives.
# Uses buf (npm @bufbuild/buf, via npx) with the local ts-proto plugin; no
# system protoc is needed. Works from any current directory.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

rm -rf "$OUT/generated"

cd "$ROOT"
# npx puts node_modules/.bin (protoc-gen-ts_proto) on PATH for buf.
npx --no buf generate api --template api/buf.gen.yaml -o "$OUT"

# Fail loudly if buf silently produced nothing.
test -f "$OUT/generated/envoy/service/ratelimit/v3/rls.ts"
