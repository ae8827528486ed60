#!/usr/bin/env bash
# The CPU engine on arm64, checked from an x86-64 Debian 12 machine: cross-builds
# the library and the test suite with Debian's aarch64 toolchain (CUDA off) and
# runs the CPU kernels' quick cases under qemu-user twice: as a CPU with the
# dot-product instructions (qemu's "max": the neon-dotprod kernel runs the q8_0 and q4_0 caches) and
# as a Cortex-A72 without them (the portable kernel for those; NEON for bf16). An
# emulator says nothing about speed: this checks that arm64 builds and computes
# what the other kernels compute. Not part of scripts/test.sh (the cross
# packages and the second build would add about ten minutes to every run).
#   bash scripts/test_arm64.sh        (installs the cross packages once, builds in build-arm64/)
# Cases: ARM64_TESTS (a doctest -tc filter) replaces the default list.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

# The toolchain, qemu, and the arm64 builds of the libraries the CLI and the server link.
if [[ $(dpkg --print-architecture) != amd64 ]]; then
  echo "test_arm64.sh cross-builds from an amd64 machine" >&2
  exit 1
fi
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64
need=()
for p in g++-aarch64-linux-gnu qemu-user libssl-dev:arm64 libcpp-httplib-dev:arm64 libedit-dev:arm64 \
  zlib1g-dev:arm64 libbrotli-dev:arm64; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

build=build-arm64
mkdir -p $build
cat > $build/toolchain.cmake <<'EOF'
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
# doctest's test discovery runs the built suite: through qemu
set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64;-L;/usr/aarch64-linux-gnu")
EOF
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=$PWD/$build/toolchain.cmake \
  -DFLASHSCOPE_CUDA=OFF -DFLASHSCOPE_BUILD_APP=OFF >/dev/null
cmake --build $build -j "$jobs" --target flashscope-tests flashscope-cli
bash scripts/fetch_model.sh

# Quick cases: the FP64 references of the full sweeps take tens of minutes under an emulator;
# each vector kernel is compared with the portable one instead, whose own FP64 checks run natively.
tests=${ARM64_TESTS:-"cpu kernels*,cpu decode attention q8_0 and q4_0: every kernel gives the portable*,cpu decode attention q8_0: bad*,cpu decode attention: bad*,kv q8_0*,kv q4_0*,kv type*,quant matmul: Q8 activations*,quant matmul: the arm64*,quant matmul: every weight type*,forward: a synthetic model matches*,forward: incremental decode*,forward: prefill longer*"}
# One OpenMP thread: threads that wait for each other crawl under qemu (the same case takes 0.7 s on
# one thread and over 5 minutes on two); the split across threads is arch-independent code, tested natively.
export OMP_NUM_THREADS=1
status=0
for cpu in max cortex-a72; do
  echo "== arm64 ($cpu) under qemu"
  qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu $build/tests/flashscope-tests -tc="$tests" 2>&1 |
    grep -E "MESSAGE|ERROR|^\[doctest\] (test cases|assertions)" || status=1  # pipefail: doctest's status
  # The whole CPU forward end to end, over each cache: the default model still names Paris, greedily.
  for kv in bf16 q8_0 q4_0; do
    reply=$(qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu $build/cli/flashscope-cli generate \
      -m assets/models/SmolLM2-135M-Instruct.Q4_1.gguf -p "The capital of France is" -n 4 --temp 0 \
      --kv-type $kv -t 1 2>/dev/null) || status=1
    reply=${reply%%$'\n'*}  # the reply's first line
    echo "generate --kv-type $kv: \"The capital of France is$reply\""
    [[ $reply == *Paris* ]] || { echo "FAILED: no Paris on arm64 ($cpu, $kv)"; status=1; }
  done
done
exit $status
