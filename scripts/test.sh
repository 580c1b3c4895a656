#!/usr/bin/env bash
# The whole test suite, on a fresh machine: fetch the default models with repohop's own fetch
# step (idempotent; skipped when present and verified), then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -- models fetch
cargo test --all-targets
