#!/usr/bin/env bash
# Builds llama.cpp's `llama-server` once into the cache beside the models, for the remote-engine
# tests, and prints the binary's path. Its source comes from the llama-cpp-python sdist on PyPI
# (pinned and checksummed); cmake and ninja from PyPI when the machine has none. The build is
# portable x86-64 with AVX2/FMA (no -march=native), so a cached binary runs on any machine
# of this kind. First run: about 10 minutes on 2 cores; afterwards it only prints the path.
set -euo pipefail

VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$VERSION.tar.gz

CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/repohop/tools
DEST=$CACHE/llama-server-$VERSION
BIN=$DEST/bin/llama-server
if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$CACHE"
WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
log() { echo "llama-server: $*" >&2; }

log "downloading llama-cpp-python $VERSION (its vendored llama.cpp)"
python3 - "$URL" "$WORK/src.tar.gz" <<'EOF'
import sys, urllib.request
urllib.request.urlretrieve(sys.argv[1], sys.argv[2])
EOF
echo "$SHA256  $WORK/src.tar.gz" | sha256sum -c --quiet - >&2
tar -xzf "$WORK/src.tar.gz" -C "$WORK"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp

if ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  if [ ! -x "$CACHE/venv/bin/cmake" ] || [ ! -x "$CACHE/venv/bin/ninja" ]; then
    log "installing cmake and ninja from PyPI into $CACHE/venv"
    python3 -m venv "$CACHE/venv"
    "$CACHE/venv/bin/pip" install -q cmake ninja >&2
  fi
  export PATH=$CACHE/venv/bin:$PATH
fi

log "building (about 10 minutes on 2 cores)"
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$WORK/build" --target llama-server -j "$(nproc)" >&2

# Into place atomically: a half-copied binary is never taken for a built one.
mkdir -p "$DEST/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
"$BIN" --version >&2
echo "$BIN"
