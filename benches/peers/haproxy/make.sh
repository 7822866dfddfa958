#!/usr/bin/env bash
# The relay anchor (issue 41): two HAProxy relays with mTLS between them, in front of an app.
#   client -> relay A (127.0.0.1:FRONT, HTTP, one thread) -> mTLS (P-256 certificates from a throwaway CA,
#   verify required, SNI and host checked) -> relay B (127.0.0.1:MID, one thread) -> the app (127.0.0.1:APP)
# Keep-alive on both sides (`http-reuse always`). What a mesh's sidecar pair costs at the least, done by a
# well-tuned C proxy that only relays.
# Usage: make.sh DIR FRONT MID APP   Writes the CA, certificates and a.cfg/b.cfg into DIR, checks both with
# `haproxy -c`, and prints DIR. Needs haproxy and openssl.
set -euo pipefail
dir="$1" front="$2" mid="$3" app="$4"
mkdir -p "$dir"
cd "$dir"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -days 2 \
  -subj /CN=relay-anchor-ca 2>/dev/null
for n in a b; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$n.key" -out "$n.csr" \
    -subj "/CN=side-$n" 2>/dev/null
  printf 'subjectAltName=DNS:side-%s,IP:127.0.0.1\n' "$n" > "$n.ext"
  openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$n.crt" -days 2 \
    -extfile "$n.ext" 2>/dev/null
  cat "$n.crt" "$n.key" > "$n.pem"
done
# tune.bufsize and the timeouts as the recipe measured them; 1 MiB answers stream through the buffers.
common="global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  http-reuse always
  option http-keep-alive"
cat > a.cfg <<CFG
$common
frontend fa
  bind 127.0.0.1:$front
  default_backend ba
backend ba
  server b 127.0.0.1:$mid ssl crt $dir/a.pem ca-file $dir/ca.crt verify required sni str(side-b) verifyhost side-b alpn http/1.1
CFG
cat > b.cfg <<CFG
$common
frontend fb
  bind 127.0.0.1:$mid ssl crt $dir/b.pem ca-file $dir/ca.crt verify required alpn http/1.1
  default_backend bb
backend bb
  server app 127.0.0.1:$app
CFG
haproxy -c -f a.cfg >/dev/null
haproxy -c -f b.cfg >/dev/null
echo "$dir"
