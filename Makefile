# Switchyard developer entry points. The two a fresh machine needs:
#   make up     builds, then runs examples/quickstart.yaml locally (router and manager sidecars, example app)
#   make test   every check and test, e2e included (builds the control plane on first use)
# Also: make demo (the quickstart in real pods on a local cluster, operator from the chart), make down,
# make images (OCI images without a container engine), make release VERSION=x.y.z [REGISTRY=...] (images
# and charts pushed to a registry by digest, the CLI tarball, checksums: deploy/release).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: test test-run lint unit e2e tools cluster-up cluster-down demo down crds fuzz up images release

# The quickstart as local processes on 127.0.0.1; Ctrl-C stops it.
up:
	$(CARGO) build --release --locked -p switchyard -p switchyard-sidecar -p switchyard-example-app
	target/release/switchyard up -f examples/quickstart.yaml

# The e2e tests start the test control plane on first use; `session` stops it when the run ends
# (unless it was already up before, e.g. from `make demo`). Its Go tools build from the start, beside
# the Rust build (`tools-beside`): on a cold machine that build alone takes about half an hour.
test:
	e2e/cluster/tools-beside $(MAKE) --no-print-directory lint test-run

test-run:
	e2e/cluster/session $(CARGO) test --workspace --all-targets --no-fail-fast

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# Tests that need no cluster.
unit:
	$(CARGO) test --workspace --exclude switchyard-e2e

e2e: tools
	e2e/cluster/session $(CARGO) test -p switchyard-e2e

tools:
	e2e/cluster/build-tools

cluster-up:
	e2e/cluster/up

cluster-down:
	e2e/cluster/down

demo:
	e2e/cluster/demo

down:
	e2e/cluster/demo --down

# OCI images of the operator, sidecar and example app (release binaries) and the pause image, without a
# container engine: archives and images.env in target/images.
images:
	deploy/build-images

# A release: the images pushed with crane to REGISTRY (default ghcr.io/switchyard-dev) and recorded by
# digest, both charts pinned to those digests and pushed to oci://REGISTRY/charts, the CLI tarball and
# SHA256SUMS in target/dist/VERSION. The e2e tests run the same script against the test cluster's registry.
REGISTRY ?= ghcr.io/switchyard-dev
release:
	@[ -n "$(VERSION)" ] || { echo "usage: make release VERSION=x.y.z [REGISTRY=host[:port]/path]" >&2; exit 2; }
	e2e/cluster/build-tools helm crane syft
	VERSION="$(VERSION)" REGISTRY="$(REGISTRY)" deploy/release

crds:
	$(CARGO) run -q -p switchyard-crds --bin crdgen

# Deeper fuzzing than `make test` does: each cargo-fuzz target for FUZZ_SECONDS (needs a nightly toolchain;
# cargo-fuzz is installed on first use). `make test` runs the same properties on mutated seeds.
FUZZ_SECONDS ?= 60
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	for t in frame_decode http_request; do \
	  $(CARGO) +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS); \
	done
