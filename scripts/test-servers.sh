#!/usr/bin/env bash
# Makes sure the servers the integration tests start are installed: redis-server, redis-sentinel
# and redis-cli, memcached, openssl (test certificates). Missing ones are installed with apt-get
# when running as root on Debian/Ubuntu (as CI does); otherwise this stops at once with the exact
# command to run, since a test that cannot start its server would fail anyway.
set -euo pipefail

declare -A package_of=(
  [redis-server]=redis-server
  [redis-sentinel]=redis-sentinel
  [redis-cli]=redis-tools
  [memcached]=memcached
  [openssl]=openssl
)
missing=()
for cmd in redis-server redis-sentinel redis-cli memcached openssl; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${package_of[$cmd]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if command -v apt-get >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing the test servers: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    exit 0
  fi
  echo "The tests need servers that are not installed: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
elif command -v brew >/dev/null 2>&1; then
  echo "The tests need servers that are not installed: ${missing[*]}. Install them with:" >&2
  echo "  brew install redis memcached openssl" >&2
else
  echo "The tests need these commands on the PATH: redis-server, redis-sentinel, redis-cli, memcached, openssl (missing: ${missing[*]})." >&2
fi
exit 1
