#!/usr/bin/env bash
# The whole test suite, on a fresh machine: fetch the default models with repohop's own fetch
# step (idempotent; skipped when present and verified), then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -- models fetch
# The eval tests run real pytest suites: a venv with pytest, found through REPOHOP_TEST_PYTHON.
if [ ! -x target/test-venv/bin/python ] || ! target/test-venv/bin/python -c 'import pytest' 2>/dev/null; then
  python3 -m venv target/test-venv
  target/test-venv/bin/pip install -q pytest==7.4.0
fi
export REPOHOP_TEST_PYTHON=$PWD/target/test-venv/bin/python
# The remote-engine tests drive a real llama-server: built once into the cache beside the models
# (about 10 minutes the first time), then only found there.
REPOHOP_LLAMA_SERVER=$(bash scripts/llama_server.sh)
export REPOHOP_LLAMA_SERVER
export REPOHOP_REQUIRE_SERVER=${REPOHOP_REQUIRE_SERVER:-1}
# The evaluator's sandbox tests fail, rather than skip, where namespaces are missing.
export REPOHOP_REQUIRE_SANDBOX=${REPOHOP_REQUIRE_SANDBOX:-1}
# Machines of this kind have AVX2 at least: the real-model tests of exact several-row passes
# (speculative decoding, batches) fail, rather than skip, where our quantized kernels don't run.
export REPOHOP_REQUIRE_QUANT_KERNELS=${REPOHOP_REQUIRE_QUANT_KERNELS:-1}
cargo test --all-targets
# Again the kernel unit tests, on the portable kernels and on the AVX2 ones: on an AVX-512
# machine the run above covers only the AVX-512 ones (on an AVX2 machine the AVX2 run repeats
# it). The tests check that each run took the path it asked for.
REPOHOP_PORTABLE_KERNELS=1 cargo test --lib -- kernels:: quantized:: fused::
REPOHOP_AVX2_KERNELS=1 cargo test --lib -- kernels:: quantized:: fused::
