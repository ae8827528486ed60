# Sourced by the scripts: puts nvcc on PATH when the toolkit is installed but
# not on PATH, and picks the CUDA architectures to build.
#   FLASHSCOPE_CUDA_ARCHS  overrides the choice (e.g. "80;90a")
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
jobs=$(nproc 2>/dev/null || echo 2)
