# Sourced by the scripts: puts nvcc on PATH when the toolkit is installed but
# not on PATH, and picks what to build and where.
#   FLASHSCOPE_CUDA_ARCHS  overrides the CUDA architectures (e.g. "80;90a")
#   FLASHSCOPE_HOPPER      ON or OFF overrides whether the sm_90a objects are built
if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
jobs=$(nproc 2>/dev/null || echo 2)

# The sm_90a (Hopper) objects compile for minutes and run only on compute
# capability 9.0: built where the GPU is one, or where the architectures
# asked for name 90a, else left out.
hopper_option() {
  local on=OFF
  if [[ ${FLASHSCOPE_CUDA_ARCHS:-} == *90a* ]]; then
    on=ON
  elif has_gpu && [[ $(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1) == 9.0 ]]; then
    on=ON
  fi
  echo "-DFLASHSCOPE_HOPPER=${FLASHSCOPE_HOPPER:-$on}"
}

# Configures build folder $1 with the options run.sh and test.sh share (the
# same options, so one folder serves both and neither rebuilds the other's
# objects), then the CUDA options in the rest of the arguments.
configure() {
  local build=$1
  shift
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSCOPE_WARNINGS_AS_ERRORS=ON \
    -DCMAKE_INSTALL_PREFIX="$PWD/$build/install" "$@" >/dev/null
}
