#!/bin/bash
# A CUDA 13.0 build toolchain from PyPI wheels, for building `--features cuda` on a machine
# with no GPU and no system CUDA: nvcc (candle-kernels compiles its .cu files at build time),
# the headers, and the libraries cudarc links (`dynamic-linking`), plus a link-time stub of
# the driver's libcuda.so.1 (no wheel has it; the real one comes with the GPU's driver).
#
# Usage: scripts/cuda_toolchain.sh DIR      (DIR outside the repo, e.g. /work/cuda-env)
#        source DIR/env.sh && cargo build --release --features cuda
#
# CUDA 13.0 matches driver 580: PTX from a newer nvcc (ISA > 9.0) would not load on it.
# At run time put the driver's folder and the CUDA 13 libraries on LD_LIBRARY_PATH (e.g. the
# nvidia/cu13/lib folder of a cu130 PyTorch); never the stub, whose functions all return
# CUDA_ERROR_NO_DEVICE.
set -euo pipefail
DIR=$(realpath -m "${1:?usage: $0 DIR}")
ROOT=$(dirname "$(realpath "$0")")/..
mkdir -p "$DIR"
[ -x "$DIR/venv/bin/pip" ] || python3 -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install -q \
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-cccl==13.0.85 nvidia-cuda-runtime==13.0.96 nvidia-cublas==13.0.2.14 \
  nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88
TOP=$("$DIR/venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
"$TOP/bin/nvcc" --version | grep -q 'release 13.0' || { echo "nvcc is not 13.0" >&2; exit 1; }

# Unversioned names for the linker; lib64 for the tools that look there.
cd "$TOP/lib"
for l in cublas cublasLt cudart nvrtc; do ln -sf "lib$l.so.13" "lib$l.so"; done
ln -sf libcurand.so.10 libcurand.so
ln -sfn lib "$TOP/lib64"

# The driver stub: every cu* function cudarc declares, each returning CUDA_ERROR_NO_DEVICE.
# cudarc's sources come with the project's locked dependencies (a fresh machine has none yet).
cargo fetch --quiet --manifest-path "$ROOT/Cargo.toml"
mkdir -p "$TOP/lib/stubs"
SYS=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs | tail -1)
grep -ohE '^\s+(pub )?fn (cu[A-Za-z0-9_]+)\(' "$SYS" | sed -E 's/.*fn (cu[A-Za-z0-9_]+)\(/\1/' \
  | sort -u | awk '{print "int " $1 "(void) { return 100; }"}' > "$DIR/libcuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$TOP/lib/stubs/libcuda.so.1" "$DIR/libcuda_stub.c"
ln -sf libcuda.so.1 "$TOP/lib/stubs/libcuda.so"

cat > "$DIR/env.sh" <<ENV
export CUDA_TOP=$TOP
export PATH=\$CUDA_TOP/bin:\$PATH NVCC=\$CUDA_TOP/bin/nvcc
export CUDA_HOME=\$CUDA_TOP CUDA_PATH=\$CUDA_TOP CUDA_ROOT=\$CUDA_TOP CPATH=\$CUDA_TOP/include
export CUDA_COMPUTE_CAP=\${CUDA_COMPUTE_CAP:-90}
ENV
echo "wrote $DIR/env.sh (cudarc finds lib/ and lib/stubs/ under CUDA_HOME)"
