# Switchyard developer entry points. The two a fresh machine needs:
#   make demo   builds everything, starts a local control plane, installs the charts, runs the operator
#               and applies examples/quickstart.yaml
#   make test   every check and test, e2e included (builds the control plane on first use)
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: test lint unit e2e tools cluster-up cluster-down demo down crds fuzz

test: lint
	$(CARGO) test --workspace --all-targets --no-fail-fast

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

# Tests that need no cluster.
unit:
	$(CARGO) test --workspace --exclude switchyard-e2e

e2e: tools
	$(CARGO) test -p switchyard-e2e

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
