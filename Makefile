# Switchyard developer entry points. The two a fresh machine needs:
#   make up     builds, then runs examples/quickstart.yaml locally (router and manager sidecars, example app)
#   make test   every check and test, e2e included (builds the control plane on first use)
# Also: make demo (the quickstart in real pods on a local cluster, operator from the chart), make down,
# make guide (the user guide, an mdBook, in target/book/html), make reference (its generated pages),
# make images (OCI images without a container engine), make release VERSION=x.y.z [REGISTRY=...] (images
# and charts pushed to a registry by digest, the CLI tarball, checksums: deploy/release).
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: test test-run lint unit e2e tools cluster-up cluster-down demo down crds fuzz up images release guide reference

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

# The user guide (book.toml, pages in docs/) into target/book/html, with its link checker; mdBook and
# mdbook-linkcheck2 are installed into .tools/mdbook on first use (e2e/cluster/build-mdbook).
guide:
	PATH="$$(e2e/cluster/build-mdbook):$$PATH" mdbook build

# The guide's generated reference pages (docs/reference/: CRD fields, CLI help, metrics), rewritten from
# the code; cli/tests/reference fails while they are stale.
reference:
	SWITCHYARD_WRITE_REFERENCE=1 $(CARGO) test -q -p switchyard --test reference

# Deeper fuzzing than `make test` does: each cargo-fuzz target for FUZZ_SECONDS (needs a nightly toolchain;
# cargo-fuzz is installed on first use). `make test` runs the same properties on mutated seeds.
FUZZ_SECONDS ?= 60
fuzz:
	command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	for t in frame_decode http_request; do \
	  $(CARGO) +nightly fuzz run $$t -- -max_total_time=$(FUZZ_SECONDS); \
	done
