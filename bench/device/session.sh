#!/usr/bin/env bash
# The GPU machine's side of a lease (bench/device/README.md): steps run from
# the repository root there, with .device-carry/ carried (prepare.sh made it).
# Builds and models live in /tmp/w, outside the tree, so they survive the
# next call's copy of the tree while the machine stays warm.
#   usage: bash .device-carry/session.sh STEP...
#   start     nvidia-smi; background builds (sm_90a, Ninja) of "after" (this tree: cli + tests) and
#             "before" (before.tar.gz: cli; NO_BEFORE=1 skips it), and llama.cpp's CUDA llama-bench (LLAMA=1);
#             jobs JA / JB / JL (default 8 / 5 / 3 on 16 cores)
#   part      moves the carried model parts into /tmp/w/parts
#   wait      until the background builds end (WAIT_JOBS, default "before after llama"; WAIT_MAX seconds)
#   join      the parts into /tmp/w/real/*.gguf (Gemma only when p6 came), linked into assets/models of
#             both trees; sha256 printed
#   models    make-model files in /tmp/w/gen (MODELS="preset:type ...", default: #18's and #21's shapes)
#   tests     the after build's whole suite (TESTS_FILTER: a doctest -tc filter) -> $OUT/tests.log
#   variant   NAME MACRO VALUE...: after's cli rebuilt with `#define MACRO VALUE` in FILE (VARIANT_FILE),
#             kept with its library in /tmp/w/var-NAME (run as /tmp/w/cli-NAME); the tree is put back after (runs in the background: wait on "variant")
#   matrix    prompt and decode tok/s of CLIS ("before", "after", or variant names; NAME@VAR=VALUE runs NAME's cli
#             with VAR=VALUE in its environment, NAME@A=1+B=2 with both) on MX_MODELS, MX_ROUNDS interleaved rounds, batches
#             E2E_BATCH (default 1), more `bench e2e` flags in E2E_ARGS -> $OUT/matrix.txt
#   gen       `generate`'s decode rate (what a chat user sees) of CLIS on MX_MODELS, MX_ROUNDS rounds -> $OUT/gen.txt
#   llama     llama-bench -fa 1 -p 512 -n 128 on LL_MODELS (default: MX_MODELS) -> $OUT/llama.txt
#   timeline  the kernels' own start and end times (CUPTI) of a few decode steps: TL_MODEL, TL_STEPS, TL_ENV,
#             TL_CMD (generate, the default, or e2e: bench e2e's loop)
#             -> $OUT/timeline.csv (bench/decode_timeline.py)
#   llama-bin unpacks a carried llama-bench.tar.gz (prepare.sh LLAMA_BUILD=1) instead of LLAMA=1's build
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
here=$(cd "$(dirname "$0")/.." && pwd)
C=$here/.device-carry
W=/tmp/w
mkdir -p $W/parts $W/gen $W/real
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
cli_of() { case ${1%%@*} in before) echo $W/before/build/cli/flashscope-cli ;; after) echo $W/after/build/cli/flashscope-cli ;;
  *) echo $W/cli-$1 ;; esac; }
configure() {  # source dir, build dir
  cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    -DCMAKE_PREFIX_PATH="$C/prefix" -DFLASHSCOPE_BUILD_APP=OFF
}
keep_variant() {  # name: after's cli and its library into $W/var-NAME, run as $W/cli-NAME
  local v=$W/var-$1
  rm -rf $v && mkdir -p $v && cp $W/after/build/cli/flashscope-cli $W/after/build/runtime/libflashscope.so* $v/ &&
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s/flashscope-cli "$@"\n' $v $v > $W/cli-$1 && chmod +x $W/cli-$1
}
detach() {  # name, command: runs on after this call returns (a new session); rc in $W/NAME.rc
  rm -f $W/$1.rc
  setsid nohup bash -c "$2; echo \$? > $W/$1.rc" > $W/$1.log 2>&1 < /dev/null &
}
models_default="llama3.2-1b:q4_k_m qwen3-0.6b:q4_k_m qwen3-1.7b:q4_k_m gemma3-270m:q4_k_m smollm2-135m:q8_0"

while (($#)); do
  step=$1
  shift
  case $step in
    start)
      nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version --format=csv | tee $W/gpu.txt
      if [[ ${NO_BEFORE:-0} != 1 ]]; then
        rm -rf $W/before && mkdir -p $W/before/src && tar xzf $C/before.tar.gz -C $W/before/src
        detach before "$(declare -f configure); C=$C; configure $W/before/src $W/before/build &&
          ninja -C $W/before/build -j${JB:-5} flashscope-cli"
      fi
      rm -rf $W/after && mkdir -p $W/after/src
      (cd $here && tar cf - --exclude=./.device-carry --exclude='./build*' --exclude=./assets/models --exclude=./.git .) |
        tar xf - -C $W/after/src
      detach after "$(declare -f configure); C=$C; configure $W/after/src $W/after/build &&
        ninja -C $W/after/build -j${JA:-8} flashscope-cli flashscope-tests"
      if [[ ${LLAMA:-0} == 1 ]]; then
        rm -rf $W/llama && mkdir -p $W/llama && tar xzf $C/llama.tar.gz -C $W/llama
        detach llama "cd $W/llama/llama.cpp && cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
          -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
          -DLLAMA_BUILD_APP=OFF -DCMAKE_BUILD_TYPE=Release && cmake --build build -j${JL:-3} --target llama-bench"
      fi
      ;;
    llama-bin)  # a llama-bench built here (prepare.sh LLAMA_BUILD=1), carried in a call of its own
      b=$W/llama/llama.cpp/build/bin
      rm -rf $W/llama && mkdir -p $b/extra && tar xzf $C/llama-bench.tar.gz -C $b && echo 0 > $W/llama.rc
      # Libraries the image may keep outside the loader's path: NCCL (PyTorch's wheel), OpenSSL (carried).
      ldconfig -p | grep -q libnccl.so.2 ||
        ln -sf "$(find / -name libnccl.so.2 -not -path '/proc/*' 2>/dev/null | head -n 1)" $b/extra/
      for l in libssl.so.3 libcrypto.so.3; do ldconfig -p | grep -q $l || ln -sf $b/lib/$l $b/extra/; done
      LD_LIBRARY_PATH=$b/extra:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} ldd $b/llama-bench | grep "not found"
      echo "llama-bench unpacked"
      ;;
    part)
      mv $C/model-parts/* $W/parts/ 2>/dev/null
      ls $W/parts | tr '\n' ' '
      echo
      ;;
    wait)
      for j in ${WAIT_JOBS:-before after llama}; do
        [[ -f $W/$j.log ]] || continue
        for _ in $(seq 1 ${WAIT_MAX:-540}); do [[ -f $W/$j.rc ]] && break; sleep 1; done
        echo "$j: rc $(cat $W/$j.rc 2>/dev/null || echo '(still running)')"
        tail -n 2 $W/$j.log | cut -c1-200
      done
      ;;
    join)
      size=$(cat $W/parts/smollm2.size)
      cat $W/parts/p[0-9] > $W/all.bin
      head -c "$size" $W/all.bin > $W/real/SmolLM2-135M-Instruct.Q4_1.gguf
      # Gemma only when every part came (SmolLM2 alone is p0 and p1).
      [[ -f $W/parts/p6 ]] && tail -c +"$((size + 1))" $W/all.bin > $W/real/gemma-3-270m-q4_k_m.gguf
      rm -f $W/all.bin
      sha256sum $W/real/*.gguf
      for d in $W/after/src $W/before/src $here; do
        [[ -d $d ]] && mkdir -p $d/assets/models && ln -sf $W/real/*.gguf $d/assets/models/
      done
      ;;
    models)
      for m in ${MODELS:-$models_default}; do
        f=$W/gen/${m%%:*}-${m##*:}.gguf
        [[ -f $f ]] || $(cli_of after) make-model --out $f --preset ${m%%:*} --type ${m##*:} | tail -n 1
      done
      ;;
    tests)
      (cd $W/after/src && timeout ${TESTS_TIMEOUT:-560} $W/after/build/tests/flashscope-tests --duration=true \
        ${TESTS_FILTER:+-tc="$TESTS_FILTER"}) > $OUT/tests.log 2>&1
      echo "tests exit $?"
      grep -E "^\[doctest\] (test cases|assertions)|ERROR|FAILED" $OUT/tests.log | head -40
      ;;
    variant)
      name=$1 macro=$2 value=$3
      shift 3
      f=$W/after/src/${VARIANT_FILE:-kernels/model/quant_gemv_q8.cuh}
      # The kernels live in libflashscope.so, which the cli finds by its RUNPATH (after's build folder):
      # a copied cli alone runs whatever library after's folder holds by then. So the variant keeps its
      # own library beside its cli (a wrapper sets LD_LIBRARY_PATH), and the put-back file is touched:
      # `mv` keeps the older mtime, and ninja would leave after's build as the variant.
      detach variant "$(declare -f keep_variant); W=$W; cp $f $f.orig &&
        sed -i 's/^#define $macro .*/#define $macro $value/' $f &&
        ninja -C $W/after/build -j16 flashscope-cli && keep_variant $name;
        mv $f.orig $f && touch $f && ninja -C $W/after/build -j16 flashscope-cli"
      ;;
    matrix)
      for r in $(seq 1 ${MX_ROUNDS:-2}); do
        for m in ${MX_MODELS:-$W/gen/*.gguf}; do
          for c in ${CLIS:-before after}; do
            env_of=()
            [[ $c == *@* ]] && IFS=+ read -ra env_of <<< "${c#*@}"  # NAME@A=1+B=2
            got=$(env "${env_of[@]}" $(cli_of $c) bench e2e -m $m --batch ${E2E_BATCH:-1} --runs ${E2E_RUNS:-3} \
              ${E2E_ARGS:-} --json 2>&1 |
              grep -o '"batch":[0-9]*\|"prompt_tokens_per_s":[0-9.]*\|"decode_tokens_per_s":[0-9.]*' | paste -sd' ')
            echo "round $r | $c | $(basename $m) | $got"
          done
        done
      done | tee -a $OUT/matrix.txt
      ;;
    gen)  # what a user of `generate` sees: its decode rate (Session::generate, the CLI's sampling defaults,
      # printing to /dev/null) for CLIS on MX_MODELS, MX_ROUNDS interleaved rounds, GEN_TOKENS tokens -> $OUT/gen.txt
      for r in $(seq 1 ${MX_ROUNDS:-2}); do
        for m in ${MX_MODELS:-$W/gen/*.gguf}; do
          for c in ${CLIS:-before after}; do
            env_of=()
            [[ $c == *@* ]] && IFS=+ read -ra env_of <<< "${c#*@}"
            got=$(env "${env_of[@]}" $(cli_of $c) generate -m $m -p "The capital of France is" -n ${GEN_TOKENS:-128} \
              --temp 0 --device cuda 2>&1 >/dev/null | grep -o 'decode .*tokens/s')
            echo "round $r | $c | $(basename $m) | $got"
          done
        done
      done | tee -a $OUT/gen.txt
      ;;
    timeline)  # the GPU's own kernel timeline (bench/cupti_timeline.cpp) of TL_STEPS decode steps of TL_MODEL under
      # after's cli (TL_ENV: more variables for it) -> $OUT/timeline.csv; python3 bench/decode_timeline.py reads it
      cuda=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
      lib=$(dirname "$(find -L "$cuda" -name 'libcupti.so*' 2>/dev/null | head -n 1)")
      g++ -std=c++17 -O2 -shared -fPIC -I"$cuda/include" -I"$cuda/extras/CUPTI/include" "$here/bench/cupti_timeline.cpp" \
        -L"$lib" -lcupti -Wl,-rpath,"$lib" -o $W/libcupti_timeline.so &&
        if [[ ${TL_CMD:-generate} == e2e ]]; then  # bench e2e's loop (greedy, a 512-token prompt, no printing)
          tl_args=(bench e2e -m "$TL_MODEL" --batch 1 --runs 1 --prompt-len 512 --gen-len ${TL_STEPS:-64} --device cuda)
        else
          tl_args=(generate -m "$TL_MODEL" -p "The capital of France is" -n ${TL_STEPS:-64} --temp 0 --device cuda)
        fi &&
        env ${TL_ENV:-} CUDA_INJECTION64_PATH=$W/libcupti_timeline.so FLASHSCOPE_TIMELINE=$OUT/timeline.csv \
          $(cli_of after) "${tl_args[@]}" > $OUT/timeline.log 2>&1
      echo "timeline exit $?"
      tail -n 3 $OUT/timeline.log
      ;;
    llama)
      for m in ${LL_MODELS:-${MX_MODELS:-$W/gen/*.gguf}}; do
        echo "### $(basename $m)"
        b=$W/llama/llama.cpp/build/bin
        LD_LIBRARY_PATH=$b/extra:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-} \
          $b/llama-bench -m $m -ngl 99 -fa 1 -p 512 -n 128 -r ${LL_REPS:-3} | grep -E "pp512|tg128"
      done | tee -a $OUT/llama.txt
      ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
