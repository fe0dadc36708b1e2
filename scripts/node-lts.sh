#!/usr/bin/env bash
# Obtains Node.js <version>'s official binary from the npm registry (the node-linux-<arch> package,
# the binary Node publishes) into <dir>/bin/node, for `make test-lts`. No other download source:
# the npm registry is what a machine of this project reaches.
set -euo pipefail
version=$1
dir=$2
case "$(uname -m)" in
  x86_64) arch=x64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "node-lts: no Node.js package for $(uname -m)" >&2; exit 1 ;;
esac
case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "node-lts: no Node.js package for $(uname -s)" >&2; exit 1 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "node-$os-$arch@$version" >/dev/null)
mkdir -p "$dir"
tar -xzf "$tmp"/node-"$os"-"$arch"-"$version".tgz -C "$dir" --strip-components=1
"$dir/bin/node" --version
