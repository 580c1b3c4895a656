# Sourced by the device scripts (gpu_check.sh, gpu_eval.sh): what a lent GPU machine lacks.

# unxz_to IN OUT: an xz file unpacked with Python's lzma (the machine may have no xz).
unxz_to() {
  python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"
}

# CUDA 13 libraries (cuBLAS, cuRAND, NVRTC, cudart): a cu13 PyTorch's, where the environment has none.
gpu_env() {
  local nv
  nv=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH=${nv:+$nv:}/usr/local/nvidia/lib64:/usr/local/nvidia/lib:${LD_LIBRARY_PATH:-}
}
