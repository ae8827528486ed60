#!/usr/bin/env bash
# Fills .device-carry/ (git-ignored) with what a GPU lease needs and its
# machine cannot fetch (it reaches no registry): the headers and CMake
# configs of doctest, nlohmann-json and cpp-httplib (a relocatable prefix),
# a "before" tree to A/B against, llama.cpp's source from PyPI's
# llama-cpp-python sdist stripped to what its CUDA llama-bench needs, and
# the two real models cut into parts that fit one call's 64 MiB with the tree.
#   usage: bash bench/device/prepare.sh [BEFORE_REV]      (default: HEAD)
# Then the calls of bench/device/README.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-HEAD}
out=.device-carry
mkdir -p $out/prefix/include $out/prefix/lib/cmake $out/prefix/share/cmake $out/model-parts
cp bench/device/session.sh $out/

# The prefix: Debian's packages' headers and configs, doctest's made relocatable.
cp -r /usr/include/doctest /usr/include/nlohmann /usr/include/httplib.h $out/prefix/include/
cp -r /usr/lib/cmake/doctest $out/prefix/lib/cmake/
cp -r /usr/share/cmake/nlohmann_json $out/prefix/share/cmake/
sed -i 's|set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' \
  $out/prefix/lib/cmake/doctest/doctestTargets.cmake

git archive "$rev" | gzip > $out/before.tar.gz
echo "before: $(git rev-parse --short "$rev")"

# llama.cpp: the vendored tree of the sdist REFERENCE.md names, without its
# models, docs, other backends and tools (about 4 MB packed).
if [[ ! -f $out/llama.tar.gz ]]; then
  tmp=$(mktemp -d)
  pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp" 2>/dev/null ||
    pip download -q --no-deps --no-build-isolation --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp"
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp"
  l=$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp
  rm -rf "$l"/{models,docs,benches,media,pocs,gguf-py,conversion,examples/*,tests/*}
  (cd "$l"/ggml/src && rm -rf ggml-{et,metal,hexagon,sycl,vulkan,opencl,cann,musa,webgpu,zdnn,virtgpu,openvino})
  rm -rf "$l"/app/* "$l"/tools/*/
  mkdir -p "$l"/tools/llama-bench "$l"/app && touch "$l"/tests/CMakeLists.txt "$l"/app/CMakeLists.txt
  tar xzf "$tmp"/llama_cpp_python-0.3.36.tar.gz -C "$tmp" llama_cpp_python-0.3.36/vendor/llama.cpp/tools/llama-bench
  printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\n' > "$l"/tools/CMakeLists.txt
  tar czf $out/llama.tar.gz -C "$(dirname "$l")" llama.cpp
  rm -rf "$tmp"
fi

# LLAMA_BUILD=1: llama.cpp's CUDA llama-bench built here (sm_90, one static
# binary; nvcc needs no GPU), so a lease spends none of its time on it: about
# half an hour on 2 cores, in /tmp/llama-cuda (kept between sessions of this machine).
if [[ ${LLAMA_BUILD:-0} == 1 && ! -f $out/llama-bench.tar.gz ]]; then
  b=/tmp/llama-cuda
  [[ -d $b/llama.cpp ]] || { mkdir -p $b && tar xzf $out/llama.tar.gz -C $b; }
  (cd $b/llama.cpp && cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null && nice cmake --build build -j2 --target llama-bench)
  mkdir -p $b/carry/lib
  strip -o $b/carry/llama-bench $b/llama.cpp/build/bin/llama-bench
  cp /lib/x86_64-linux-gnu/libssl.so.3 /lib/x86_64-linux-gnu/libcrypto.so.3 $b/carry/lib/
  tar czf $out/llama-bench.tar.gz -C $b/carry llama-bench lib
fi

# The real models (scripts/fetch_model.sh), SmolLM2 first, in 50.5 MB parts.
m=assets/models
if [[ -f $m/SmolLM2-135M-Instruct.Q4_1.gguf && -f $m/gemma-3-270m-q4_k_m.gguf && ! -f $out/model-parts/p0 ]]; then
  cat $m/SmolLM2-135M-Instruct.Q4_1.gguf $m/gemma-3-270m-q4_k_m.gguf | split -b 50500000 -d -a 1 - $out/model-parts/p
  stat -c %s $m/SmolLM2-135M-Instruct.Q4_1.gguf > $out/model-parts/smollm2.size
fi
ls -la $out $out/model-parts
