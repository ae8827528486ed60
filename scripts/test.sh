#!/usr/bin/env bash
# Sets up a fresh machine and runs every test: installs missing packages,
# builds (CUDA code too when nvcc exists: for the local GPU, or for sm_80
# only when there is none, to keep compile time down; GPU cases then skip and
# ctest counts them as skipped; the sm_90a Hopper objects only for a Hopper
# GPU or when asked for: scripts/env.sh),
# fetches the default model for the tests that read it, runs the doctest
# suites through ctest, then installs the package and builds and runs the
# example host programs against it (scripts/test_embedding.sh), and last runs each fuzz harness briefly
# (FLASHSCOPE_FUZZ_SECONDS each, default 30: with its build about 4 minutes
# on 2 cores; 0 skips them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
source scripts/env.sh
if command -v nvcc >/dev/null 2>&1; then
  if has_gpu; then archs=${FLASHSCOPE_CUDA_ARCHS:-native}; else archs=${FLASHSCOPE_CUDA_ARCHS:-80}; fi
  cuda=(-DFLASHSCOPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" "$(hopper_option)")
else
  cuda=(-DFLASHSCOPE_CUDA=OFF)
fi
# run.sh's folder where it builds the same (a GPU, or no nvcc), so what one
# script built the other reuses; without a GPU run.sh builds no CUDA code.
if has_gpu || ! command -v nvcc >/dev/null 2>&1; then build=build; else build=build-test; fi
# The official `openai` client for serve's test (tests/server/): a venv of
# its own, made once; without network the test is reported as skipped (the
# C++ server tests need nothing extra).
pyenv=$build/pyenv
if [[ ! -x $pyenv/bin/python ]] || ! $pyenv/bin/python -c "import openai" 2>/dev/null; then
  { python3 -m venv "$pyenv" && "$pyenv/bin/pip" install -q openai; } ||
    echo "note: could not install the openai package; tests/server/test_openai_client.py will skip"
fi
test_python=python3
[[ -x $pyenv/bin/python ]] && test_python="$PWD/$pyenv/bin/python"
configure $build "${cuda[@]}" -DFLASHSCOPE_TEST_PYTHON="$test_python"
cmake --build $build -j "$jobs"
[[ -x scripts/fetch_model.sh ]] && bash scripts/fetch_model.sh
# The second real model (a base model, SentencePiece, gemma3): its tokenizer, the app's model picker and
# plain completion are tested on it. Without it those tests report skipped, never passed.
[[ -x scripts/fetch_model.sh ]] && { bash scripts/fetch_model.sh gemma3-270m ||
  echo "note: could not fetch Gemma-3-270M; the tests that need it will skip"; }

# The embedding path a host program takes: install, find_package, link, run
# (the attention example, and the LLM engine's C++ and C chat examples).
bash scripts/test_embedding.sh $build

ctest --test-dir $build --output-on-failure -j "$jobs"

# The readers of untrusted input under libFuzzer with ASan and UBSan: a short
# run from the committed seeds, failing on any finding (scripts/fuzz.sh).
fuzz_seconds=${FLASHSCOPE_FUZZ_SECONDS:-30}
if ((fuzz_seconds > 0)); then bash scripts/fuzz.sh "$fuzz_seconds"; fi
