#!/usr/bin/env bash
# Generates the test PKI for mTLS between Envoy and the rate limit service.
#
# Usage: envoy/gen-certs.sh [OUT_DIR]        (default: envoy/certs, git-ignored)
#
#   ca.crt / ca.key              test CA (trusted by both sides)
#   ratelimit.crt / .key         server certificate of the service, serverAuth,
#                                SANs DNS:ratelimit, DNS:ratelimit.default.svc.cluster.local,
#                                DNS:localhost, IP:127.0.0.1 (+ RATELIMIT_EXTRA_SANS)
#   envoy.crt / .key             client certificate of Envoy, clientAuth, SAN DNS:envoy.ratelimit.test
#   intruder.crt / .key          client certificate signed by the same CA with the wrong SAN
#                                (DNS:intruder.ratelimit.test), for negative tests of GRPC_CLIENT_TLS_SAN
#
# Idempotent: files that exist, verify against the CA, match their key, carry the expected SANs and
# are valid for at least 30 more days are kept; anything else is (re)generated. A new CA
# regenerates every leaf.
#
# Environment:
#   FORCE=1                      regenerate everything
#   RATELIMIT_EXTRA_SANS         extra server SANs, e.g. "DNS:ratelimit.prod.svc.cluster.local,DNS:rl.example.com"
#   CA_DAYS (3650), DAYS (825)   validity of the CA and of the leaves
#
# Keys are ECDSA P-256 (PKCS#8 PEM), written with mode 0600; certificates 0644. Needs OpenSSL 1.1.1+.
# These are TEST credentials: use your real PKI (or cert-manager) in production.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${1:-$SCRIPT_DIR/certs}"
FORCE="${FORCE:-0}"
CA_DAYS="${CA_DAYS:-3650}"
DAYS="${DAYS:-825}"
RENEW_BEFORE_SECONDS=$((30 * 24 * 3600))

SERVER_SANS="DNS:ratelimit,DNS:ratelimit.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1"
if [[ -n "${RATELIMIT_EXTRA_SANS:-}" ]]; then
  SERVER_SANS="$SERVER_SANS,$RATELIMIT_EXTRA_SANS"
fi
ENVOY_SAN="DNS:envoy.ratelimit.test"
INTRUDER_SAN="DNS:intruder.ratelimit.test"

command -v openssl >/dev/null 2>&1 || { echo "gen-certs.sh: openssl not found" >&2; exit 1; }

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "$OUT/.gen-certs.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say() { printf '%s\n' "$*"; }

# A minimal request config, so no system openssl.cnf is needed.
req_config() { # <file> <common name> [x509 extensions section]
  {
    printf '[req]\ndistinguished_name = dn\nprompt = no\n'
    [[ -n "${3:-}" ]] && printf 'x509_extensions = %s\n' "$3"
    printf '[dn]\nCN = %s\n' "$2"
    if [[ -n "${3:-}" ]]; then
      printf '[%s]\nbasicConstraints = critical,CA:TRUE,pathlen:0\n' "$3"
      printf 'keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n'
    fi
  } >"$1"
}

new_key() { # <file>
  (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null)
}

# `DNS:a,IP:1.2.3.4` as `openssl x509 -ext subjectAltName` prints it: `DNS:a, IP Address:1.2.3.4`.
san_text() { printf '%s' "$1" | sed -e 's/IP:/IP Address:/g' -e 's/,/, /g'; }

pubkey_of_cert() { openssl x509 -in "$1" -noout -pubkey 2>/dev/null; }
pubkey_of_key() { openssl pkey -in "$1" -pubout 2>/dev/null; }

# True when <name>.crt/.key exist, the cert is signed by the current CA, matches its key, is valid for
# RENEW_BEFORE_SECONDS more and (for leaves) carries exactly the expected SANs.
usable() { # <name> [expected SANs]
  local crt="$OUT/$1.crt" key="$OUT/$1.key"
  [[ -s "$crt" && -s "$key" ]] || return 1
  openssl x509 -in "$crt" -noout -checkend "$RENEW_BEFORE_SECONDS" >/dev/null 2>&1 || return 1
  [[ "$(pubkey_of_cert "$crt")" == "$(pubkey_of_key "$key")" ]] || return 1
  if [[ "$1" != ca ]]; then
    openssl verify -CAfile "$OUT/ca.crt" "$crt" >/dev/null 2>&1 || return 1
    local got
    got="$(openssl x509 -in "$crt" -noout -ext subjectAltName 2>/dev/null | sed -n '2,$p' | sed -e 's/^ *//')"
    [[ "$got" == "$(san_text "$2")" ]] || return 1
  fi
  return 0
}

install_pair() { # <name>: move the new pair from $WORK into $OUT
  chmod 0600 "$WORK/$1.key"
  chmod 0644 "$WORK/$1.crt"
  mv -f "$WORK/$1.key" "$OUT/$1.key"
  mv -f "$WORK/$1.crt" "$OUT/$1.crt"
  say "wrote $OUT/$1.crt"
  say "wrote $OUT/$1.key"
}

CA_NEW=0
if [[ "$FORCE" == 1 ]] || ! usable ca; then
  req_config "$WORK/ca.cnf" "ratelimit test CA" v3_ca
  new_key "$WORK/ca.key"
  openssl req -x509 -new -config "$WORK/ca.cnf" -key "$WORK/ca.key" -sha256 -days "$CA_DAYS" -out "$WORK/ca.crt"
  install_pair ca
  CA_NEW=1
else
  say "kept  $OUT/ca.crt"
fi

leaf() { # <name> <common name> <extendedKeyUsage> <SANs>
  local name="$1" cn="$2" eku="$3" sans="$4"
  if [[ "$FORCE" != 1 && "$CA_NEW" == 0 ]] && usable "$name" "$sans"; then
    say "kept  $OUT/$name.crt"
    return
  fi
  req_config "$WORK/$name.cnf" "$cn"
  {
    printf 'basicConstraints = critical,CA:FALSE\n'
    printf 'keyUsage = critical,digitalSignature\n'
    printf 'extendedKeyUsage = %s\n' "$eku"
    printf 'subjectAltName = %s\n' "$sans"
    printf 'subjectKeyIdentifier = hash\n'
    printf 'authorityKeyIdentifier = keyid,issuer\n'
  } >"$WORK/$name.ext"
  new_key "$WORK/$name.key"
  openssl req -new -config "$WORK/$name.cnf" -key "$WORK/$name.key" -out "$WORK/$name.csr"
  openssl x509 -req -in "$WORK/$name.csr" -CA "$OUT/ca.crt" -CAkey "$OUT/ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$DAYS" -sha256 \
    -extfile "$WORK/$name.ext" -out "$WORK/$name.crt" 2>/dev/null
  install_pair "$name"
}

leaf ratelimit ratelimit serverAuth "$SERVER_SANS"
leaf envoy envoy.ratelimit.test clientAuth "$ENVOY_SAN"
leaf intruder intruder.ratelimit.test clientAuth "$INTRUDER_SAN"

cat <<EOF

certificates in $OUT:
  ca.crt         test CA       -> Envoy validation_context.trusted_ca, GRPC_CLIENT_TLS_CACERT
  ratelimit.crt  server cert   -> GRPC_SERVER_TLS_CERT (key: ratelimit.key -> GRPC_SERVER_TLS_KEY)
                 SANs: $SERVER_SANS
  envoy.crt      client cert   -> Envoy tls_certificates (key: envoy.key); GRPC_CLIENT_TLS_SAN=${ENVOY_SAN#DNS:}
  intruder.crt   client cert with the wrong SAN ($INTRUDER_SAN): must be rejected
EOF
