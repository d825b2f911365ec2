#!/usr/bin/env bash
# Makes a private CA and one certificate per service name for colibri's mutual TLS
# (--tls-cert/--tls-key/--tls-ca): for development, the tests and the compose TLS example.
#
#   scripts/make-certs.sh OUT_DIR NAME [NAME...]      e.g. deploy/tls router compute expert-store
#
# Writes OUT_DIR/ca.pem (give it to every service as --tls-ca), and NAME.pem + NAME.key for
# each NAME: valid as server and as client certificate, for DNS:NAME, DNS:localhost and
# 127.0.0.1. Private keys are created 0600; the CA key stays in OUT_DIR/ca.key (keep it off
# the machines, or delete it). Never commit these files. DAYS (default 365) sets the lifetime.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 OUT_DIR NAME [NAME...]" >&2
  exit 2
fi
out="$1"
shift
days="${DAYS:-365}"
mkdir -p "$out"
umask 077
if [ ! -f "$out/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out/ca.key" \
    -out "$out/ca.pem" -days "$days" -subj "/CN=colibri-ca" 2>/dev/null
fi
for name in "$@"; do
  case "$name" in
    *[!A-Za-z0-9.-]*) echo "bad name '$name' (letters, digits, '.', '-')" >&2; exit 2 ;;
  esac
  ext="$out/$name.ext"
  printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' \
    "$name" > "$ext"
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$out/$name.key" \
    -out "$out/$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$out/$name.csr" -CA "$out/ca.pem" -CAkey "$out/ca.key" -CAcreateserial \
    -out "$out/$name.pem" -days "$days" -extfile "$ext" 2>/dev/null
  rm -f "$out/$name.csr" "$ext"
done
chmod 644 "$out"/*.pem
echo "wrote $out: ca.pem and $(printf '%s.pem/.key ' "$@")"
