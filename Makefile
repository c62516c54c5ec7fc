# wave: make demo | make test | make cluster | make cluster-down
# The control plane binaries are built once from pinned Go modules into ~/.cache/wave/testenv.

SHELL := /bin/bash
CLUSTER_DIR := $(CURDIR)/target/testenv

.PHONY: test demo cluster cluster-down testenv fmt-check clippy unit e2e

## test: everything CI runs: the testenv, formatting, lints, unit and e2e tests
test: testenv fmt-check clippy
	cargo test --workspace --all-targets -- --test-threads=4

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

## demo: a config change rolling an nginx Deployment on a local control plane
demo: testenv
	@hack/demo

## cluster: start a control plane in target/testenv for manual use
cluster: testenv
	@hack/testenv up $(CLUSTER_DIR)
	@echo "export KUBECONFIG=$(CLUSTER_DIR)/kubeconfig"
	@echo "export TESTENV_DIR=$(CLUSTER_DIR)   # makes 'cargo test' reuse it"

## cluster-down: stop it
cluster-down:
	@hack/testenv down $(CLUSTER_DIR)
