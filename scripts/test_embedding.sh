#!/usr/bin/env bash
# The embedding path a host program takes, from the installed package:
# installs build folder $1 into a fresh prefix, checks that the installed
# flashscope-cli runs from there with no library path set (its RUNPATH), builds
# examples/embed_attention, embed_chat (C++) and embed_chat_c (the C ABI)
# with find_package(flashscope) against that prefix, and runs them: the chat
# examples on a synthetic model the installed CLI writes, and on the real
# SmolLM2 when assets/models/ has it. Each chat run must stream two replies
# and see its third cancelled from another thread; the C one must also finish
# a batch of three replies. Usage: scripts/test_embedding.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: scripts/test_embedding.sh BUILD_DIR}
work=$(mktemp -d "${TMPDIR:-/tmp}/flashscope-embed.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

cmake --install "$build" --prefix "$prefix" >/dev/null
env -u LD_LIBRARY_PATH "$prefix/bin/flashscope-cli" make-model --out "$work/synthetic.gguf" >/dev/null

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
for example in embed_attention embed_chat embed_chat_c; do
  cmake -S "examples/$example" -B "$work/$example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" >/dev/null
  cmake --build "$work/$example" >/dev/null
done
env -u LD_LIBRARY_PATH "$work/embed_attention/embed_attention" >/dev/null

failures=0
expect() {  # expect NAME OUTPUT_FILE REGEX: the output has a line matching REGEX
  if ! grep -Eq "$3" "$2"; then
    echo "test_embedding: $1: no line matches '$3'; its output:" >&2
    cat "$2" >&2
    failures=$((failures + 1))
  fi
}
models=("$work/synthetic.gguf")
real=${FLASHSCOPE_MODEL_DIR:-assets/models}/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -f $real ]]; then models+=("$real"); else echo "test_embedding: $real absent: the chat examples run on the synthetic model only"; fi
for model in "${models[@]}"; do
  for example in embed_chat embed_chat_c; do
    name="$example on $(basename "$model")"
    out=$work/$example.out
    if ! env -u LD_LIBRARY_PATH "$work/$example/$example" "$model" >"$out" 2>&1; then
      echo "test_embedding: $name exited with an error; its output:" >&2
      cat "$out" >&2
      failures=$((failures + 1))
      continue
    fi
    before=$failures
    expect "$name" "$out" '^\[turn 1: [1-9][0-9]* tokens streamed'
    expect "$name" "$out" '^\[turn 2: [1-9][0-9]* tokens streamed'
    expect "$name" "$out" '^\[turn 3: cancelled from another thread after [1-9][0-9]* tokens'
    if [[ $example == embed_chat_c ]]; then
      expect "$name" "$out" '^\[batch: 3 replies in [1-9][0-9]* steps\]'
      for npc in guard smith bard; do expect "$name" "$out" "^\\[$npc: [1-9][0-9]* tokens, ok\\]"; done
    fi
    ((failures == before)) && echo "test_embedding: $name: two replies streamed, the third cancelled"
  done
done
if ((failures > 0)); then
  echo "test_embedding: $failures check(s) failed" >&2
  exit 1
fi
echo "test_embedding: the installed package builds and runs every example"
