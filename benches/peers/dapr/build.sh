#!/usr/bin/env bash
# Builds daprd (Dapr's sidecar) from the Go module proxy into the git-ignored tool folder, for the `dapr`
# section of benches/run. Only the bench calls this; `make test` does not need Dapr.
#   bash benches/peers/dapr/build.sh          # prints the binary's path; cached by a version stamp
# DAPR_VERSION picks the release (default below: the newest whose dependencies the module proxy serves;
# v1.17.0 needs github.com/dapr/components-contrib v1.17.0, which it does not).
# github.com/dapr/dapr's go.mod has replace directives, which `go install pkg@version` refuses, so a
# wrapper module requires dapr and repeats them, as e2e/cluster/build-tools does for Kubernetes.
# Components: `-tags stablecomponents` (daprd refuses to build without a component set), which includes the
# `kubernetes` name resolver the bench configures: it formats an address from a template and does no I/O,
# where the standalone default, mDNS, would multicast on the machine's network.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
version="${DAPR_VERSION:-v1.16.0}"
tags="stablecomponents"
tools="${SWITCHYARD_TOOLS:-$repo/.tools}"
bin="$tools/bin"
mod="$tools/src/daprd"
want="daprd $version $tags"
log() { printf '[dapr build] %s\n' "$*" >&2; }

if [ -x "$bin/daprd" ] && [ "$(cat "$bin/.daprd.stamp" 2>/dev/null)" = "$want" ]; then
  log "daprd $version cached"
  echo "$bin/daprd"
  exit 0
fi
command -v go >/dev/null || { log "go is required (Go 1.24 or newer)"; exit 1; }
mkdir -p "$bin" "$mod"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
start=$(date +%s)
log "building daprd $version ($tags; cold: tens of minutes on 2 cores)"

# dapr's own go.mod, for its replace directives (single lines and blocks).
dapr_mod="$(go mod download -json "github.com/dapr/dapr@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[ -f "$dapr_mod" ] || { log "cannot download github.com/dapr/dapr@$version"; exit 1; }
replaces="$(awk '
  /^replace[[:space:]]*\($/ { inblock = 1; next }
  inblock && /^\)/ { inblock = 0; next }
  inblock { print; next }
  /^replace[[:space:]]/ { sub(/^replace[[:space:]]+/, ""); print }
' "$dapr_mod" | sed 's#//.*##' | grep '=>' || true)"
goline="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$dapr_mod")"
{
  echo "module switchyard.dev/benches/daprd"
  echo
  echo "go ${goline:-1.24}"
  echo
  echo "require github.com/dapr/dapr $version"
  if [ -n "$replaces" ]; then
    echo
    echo "replace ("
    echo "$replaces"
    echo ")"
  fi
} > "$mod/go.mod"
rm -f "$mod/go.sum"

# -mod=mod resolves only the modules the build needs (dapr's requirements decide their versions), so the
# components outside the tag set are not downloaded.
(cd "$mod" && nice go build -trimpath -tags "$tags" \
  -ldflags "-s -w -X github.com/dapr/dapr/pkg/buildinfo.version=${version#v}" \
  -o "$bin/daprd.new" github.com/dapr/dapr/cmd/daprd)
mv "$bin/daprd.new" "$bin/daprd"
printf '%s' "$want" > "$bin/.daprd.stamp"
log "built daprd $version in $(( $(date +%s) - start )) s"
echo "$bin/daprd"
