#!/usr/bin/env bash
# The app's headless tests: render the real window under Xvfb (Mesa's
# software OpenGL) and check the screenshot — size, not blank, both panels
# drawn — and, per mode, the dashboard's widgets (drawn, inside the
# dashboard, in the colours their views use), where the trace came from, and
# that the trace views' baked pictures were rendered once and then shown
# from their textures (app/dashboard/baked_picture.hpp).
#   render      a few frames on the Attention tiles tab; needs no model or trace
#   chat        sends a prompt to the default model and renders until the
#               answer is complete; then the answer and the picture are checked
#   tiles       --replay of the committed CPU trace, Attention tiles: mass
#               (viridis), time per tile (magma), a tile's probabilities
#   tokens      a real conversation (the default model, greedy): the model's
#               own attention of layer 16 head 0 in the Attention tab's token
#               view, the map with the conversation's tokens on its axes, and
#               the answer's decode steps, one strip each, and the summary
#               row of the layer's 9 heads
#   hover       the same with the pointer held over a word of the answer
#               (--mouse): the token view names that token's row
#   softmax     the same trace, Online softmax: the row's four tracks
#   pipeline    the same trace, Pipeline: warp spans and the SM chart
#   gpu_trace   --replay of the H200 trace of the Hopper kernel (assets/traces/),
#               Pipeline and Attention tiles: what a GPU capture looks like
#   decode      --replay of the H200 paged-decode trace (one q-tile × 128 KV
#               tiles), Attention tiles: the two heatmaps one above the other,
#               each a readable strip, not a sliver beside its twin
#   fit_TAB_AT  TAB (tiles, softmax, pipeline, lab) at AT: 720 is a 1280×720
#               window at scale 1; 1p25, 1p5, 2 are --scale 1.25, 1.5, 2 of
#               1600×1000, the window grown by the scale. Every label that
#               must fit does: the colour bars' and the tracks' ticks apart
#               and inside the dashboard, the pipeline's lanes named by role
#               (producer, consumer 0/1, the warp within), the lab's length
#               fields as wide as their largest value
#   lab         Kernel lab with --run-lab: live runs and the lab's own trace
#   throughput  Throughput with the lab running: the prefill history chart
#   replay_bad  --replay of a corrupt file: exit 1, the reader's message on
#               stderr and in the layout, the window still drawn
#   models      the model picker open beside the default model: both
#               installed models (SmolLM2 and Gemma-3-270M) listed with the
#               facts of their headers; a switch to a file that is not a
#               model shows the reader's error and keeps SmolLM2 running
#   base_model  a switch from SmolLM2 to Gemma-3-270M, a base model: loaded
#               on the engine's thread, it runs as a question-and-answer
#               transcript and the chat panel says so
#   completion  Gemma-3-270M from the start (--model), greedy: a base model's
#               question is answered in the transcript, and the answer stops
#               where the model starts the next question (as llama.cpp answers
#               the same text on the same file)
#   keys        the default model; once loaded, a question, Enter, more text and
#               Ctrl+Q arrive in one burst, as between two frames (a quick
#               typist, a slow frame): the question is sent, the text after it
#               is in the chat box, and Ctrl+Q quit while the box had the keys
#   thinking    the default model with a --chat-template that does not parse
#               (the fallback notice) and a --conversation whose answer has a
#               thinking block (drawn collapsed above the answer)
#   open_bad    File → Open trace… by keys (Ctrl+O, a path that does not
#               exist, Enter): the reader's error shows in the dialog, and its
#               Open and Cancel buttons stay in view
# Exit 77 (ctest: skipped) when xvfb-run/xauth or, for chat, keys, open_bad, thinking, models and
# base_model, a model is missing (scripts/fetch_model.sh [gemma3-270m]).
#
# usage: run_headless.sh MODE APP CHECKER OUTDIR SOURCE_DIR
set -euo pipefail
mode=$1 app=$2 checker=$3 out=$4 src=$5
width=1600 height=1000

for tool in xvfb-run xauth; do
  if ! command -v $tool >/dev/null 2>&1; then
    echo "SKIP: $tool not found (apt-get install xvfb xauth); the headless app test needs it"
    exit 77
  fi
done
model="$src/assets/models/SmolLM2-135M-Instruct.Q4_1.gguf"
gemma="$src/assets/models/gemma-3-270m-q4_k_m.gguf"
trace="$src/assets/traces/cpu-example.fstrace"
hopper="$src/assets/traces/h200-hopper-prefill-causal.fstrace"
scale=1
if [[ $mode == fit_* ]]; then
  fit_at=${mode##*_}
  if [[ $fit_at == 720 ]]; then
    width=1280 height=720
  else
    scale=${fit_at/p/.}
    width=$(awk "BEGIN { printf \"%d\", 1600 * $scale + 0.5 }")
    height=$(awk "BEGIN { printf \"%d\", 1000 * $scale + 0.5 }")
  fi
fi
# --size is at scale 1: the window (and the screenshot) is --size times --scale.
size_at_1=$(awk "BEGIN { printf \"%dx%d\", $width / $scale + 0.5, $height / $scale + 0.5 }")
args=(--size "$size_at_1" --scale "$scale")
checks=()
want_rc=0
case $mode in
  render) args+=(--frames 8 --tab attention); tab="Attention tiles" ;;
  chat)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    # Greedy and short so the answer is quick and the same every run; at most
    # 3000 frames (40 s at the app's 75 fps cap; it takes 2-3 s on 2 cores).
    tab=Throughput
    args+=(--model "$model" --tab throughput --frames 3000 --greedy --max-tokens 48
           --prompt "Explain what a GPU is in one sentence.") ;;
  keys)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    # At most 3000 frames (40 s): Ctrl+Q ends it within a few frames of the burst.
    tab=Throughput
    args+=(--model "$model" --tab throughput --frames 3000 --greedy --max-tokens 4
           --keys "What is 2+2?<Enter>next<Ctrl+Q>") ;;
  decode)
    tab="Attention tiles"
    decode="$src/assets/traces/h200-paged-decode.fstrace"
    args+=(--replay "$decode" --tab attention --frames 8)
    # At least two lines of 16 px tall and half the dashboard wide (side by side it was 4 px tall).
    checks+=(--widget tiles_mass:viridis:35 --widget tiles_time:magma:30 --min-size tiles_mass:450x32
             --min-size tiles_time:450x32 --labels tiles_mass:3 --labels tiles_time:3) ;;
  fit_tiles_*)
    tab="Attention tiles"
    args+=(--replay "$trace" --tab attention --frames 8)
    checks+=(--widget tiles_mass:viridis:35 --labels tiles_mass:3 --labels tiles_time:3 --labels tiles_probs:3) ;;
  fit_softmax_*)
    tab="Online softmax"
    args+=(--replay "$trace" --tab softmax --frames 8)
    # Four names, four ranges and at least two ticks a track.
    checks+=(--widget softmax_tracks:any:0 --labels softmax_tracks:16) ;;
  fit_pipeline_*)
    tab=Pipeline
    args+=(--replay "$hopper" --tab pipeline --frames 8)
    checks+=(--widget pipeline_warps:spans:8 --labels pipeline_warps:3 --label "pipeline_warps:producer · warp 0"
             --label "pipeline_warps:consumer 0 · warp 0" --label "pipeline_warps:consumer 1 · warp 0") ;;
  fit_lab_*)
    tab="Kernel lab"
    args+=(--tab lab --frames 8) ;;
  open_bad)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    tab="Attention tiles"
    # Keys are typed once the model has loaded; 300 frames leave the dialog open a while after.
    args+=(--model "$model" --tab attention --frames 300 --keys "<Ctrl+O><Ctrl+A>$out/no_such.fstrace<Enter>")
    checks+=(--window open_trace) ;;
  tokens)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    # A real conversation's own attention, layer 16 head 0 (a head that
    # follows the previous token), in the Attention tab's token view: the
    # map drawn in viridis with the conversation's tokens on its axes.
    tab="Attention tiles"
    args+=(--model "$model" --tab attention --frames 3000 --greedy --max-tokens 24 --layer 16 --head 0
           --prompt "The quick brown fox jumps over the lazy dog. Repeat the sentence.")
    checks+=(--widget tokens_map:viridis:15 --widget tokens_decode:viridis:15 --expect "source=chat capture"
             --widget tokens_heads:any:0 --baked tokens_map --baked tokens_decode) ;;
  hover)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    # The same conversation with the pointer held over "jumps" in the answer
    # (the window's size, scale and font fix where it is drawn): the token
    # view highlights that token's row. DRY off: asked to repeat the
    # sentence, the model does, which DRY (on by default) steers away from.
    tab="Attention tiles"
    args+=(--model "$model" --tab attention --frames 3000 --greedy --dry-multiplier 0 --max-tokens 24 --layer 16 --head 0
           --prompt "The quick brown fox jumps over the lazy dog. Repeat the sentence." --mouse 190,355)
    checks+=(--widget tokens_map:viridis:15 --expect "source=chat capture" --expect "hovered_token=·jumps") ;;
  tiles)
    tab="Attention tiles"
    args+=(--replay "$trace" --tab attention --frames 8)
    # Thresholds sit well below what the views draw (mass ~60 %, time ~55 %,
    # probabilities ~30 %: half the block is masked) and far above 0, what a
    # view drawn in another palette, or not at all, scores.
    checks+=(--widget tiles_mass:viridis:35 --widget tiles_time:magma:30 --widget tiles_probs:viridis:15
             --expect "source=replayed file" --expect "provenance=replayed from $trace"
             --baked tiles_mass --baked tiles_time --baked tiles_probs) ;;
  softmax)
    tab="Online softmax"
    args+=(--replay "$trace" --tab softmax --frames 8)
    checks+=(--widget softmax_tracks:any:0 --expect "source=replayed file" --baked softmax_tracks) ;;
  pipeline)
    tab=Pipeline
    args+=(--replay "$trace" --tab pipeline --frames 8)
    checks+=(--widget pipeline_warps:spans:8 --widget pipeline_sms:any:0 --expect "source=replayed file"
             --baked pipeline_warps --baked pipeline_sms) ;;
  gpu_trace)
    tab=Pipeline
    gpu=$hopper
    args+=(--replay "$gpu" --tab pipeline --frames 8)
    checks+=(--widget pipeline_warps:spans:8 --widget pipeline_sms:any:0 --expect "source=replayed file"
             --expect "provenance=replayed from $gpu" --baked pipeline_warps --baked pipeline_sms) ;;
  lab)
    tab="Kernel lab"
    # Until the lab has run 5 times and shown its trace; at most 1500 frames.
    args+=(--tab lab --run-lab --frames 1500)
    checks+=(--widget lab_history:any:0 --widget lab_kernels:any:0 --widget lab_warps:spans:8 --widget lab_sms:any:0
             --expect "source=kernel lab") ;;
  throughput)
    tab=Throughput
    args+=(--replay "$trace" --tab throughput --run-lab --frames 1500)
    checks+=(--widget throughput_prefill:any:0) ;;
  thinking)
    if [[ ! -f $model ]]; then
      echo "SKIP: $model is missing (scripts/fetch_model.sh fetches it)"
      exit 77
    fi
    tab=Throughput
    mkdir -p "$out"
    printf '{%% for m in messages %%}{{ m.content }}\n  {%% include "other.jinja" %%}{%% endfor %%}' > "$out/broken.jinja"
    cat > "$out/thinking_conversation.json" <<'JSON'
{"format": "flashscope-conversation", "version": 1, "system_prompt": "",
 "messages": [
  {"role": "user", "content": "What is 17 * 3?"},
  {"role": "assistant", "content": "<think>\n17 * 3 = 10 * 3 + 7 * 3 = 30 + 21 = 51.\n</think>\n\n17 × 3 = **51**."}]}
JSON
    args+=(--model "$model" --tab throughput --frames 30 --chat-template "$out/broken.jinja"
           --conversation "$out/thinking_conversation.json") ;;
  completion)
    if [[ ! -f $gemma ]]; then
      echo "SKIP: $gemma is missing (scripts/fetch_model.sh gemma3-270m fetches it)"
      exit 77
    fi
    # 8 greedy tokens at 1-2 tok/s on 2 cores; at most 3000 frames (40 s).
    tab=Throughput
    args+=(--model "$gemma" --tab throughput --frames 3000 --greedy --max-tokens 8 --prompt "What is the capital of France?") ;;
  models|base_model)
    for m in "$model" "$gemma"; do
      if [[ ! -f $m ]]; then
        echo "SKIP: $m is missing (scripts/fetch_model.sh and scripts/fetch_model.sh gemma3-270m fetch them)"
        exit 77
      fi
    done
    tab="Attention tiles"
    mkdir -p "$out"
    if [[ $mode == models ]]; then
      printf 'not a model' > "$out/not_a_model.gguf"
      target="$out/not_a_model.gguf"
    else
      target=$gemma
    fi
    # The models folder of this checkout only, whatever the environment says.
    export FLASHSCOPE_MODEL_DIR="$src/assets/models"
    # Until the switch has succeeded or failed; at most 3000 frames (40 s).
    args+=(--model "$model" --models --switch-to "$target" --tab attention --frames 3000)
    checks+=(--window model_picker) ;;
  replay_bad)
    tab="Attention tiles"
    mkdir -p "$out"
    printf 'FSTRACE\0 truncated on purpose' > "$out/bad.fstrace"
    args+=(--replay "$out/bad.fstrace" --tab attention --frames 8)
    want_rc=1 ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac

mkdir -p "$out"
rm -f "$out/$mode.png" "$out/$mode.json"
# A screen larger than the window, so none of it is off-screen. The app's
# own exit status goes to a file: xvfb-run's replaces it when its clean-up
# stumbles (exit 5), which says nothing about the app. `xvfb-run -a` can
# also lose the race for a display number to another Xvfb starting at the
# same moment (another build's tests): then it runs again.
for attempt in 1 2 3; do
  rm -f "$out/$mode.rc"
  xvfb-run -a -e "$out/$mode.xvfb.log" -s "-screen 0 $((width > 1856 ? width + 64 : 1920))x$((height > 1136 ? height + 64 : 1200))x24" \
      bash -c '"$@"; echo $? > "$0"' "$out/$mode.rc" \
      "$app" "${args[@]}" --screenshot "$out/$mode.png" --layout "$out/$mode.json" >"$out/$mode.log" 2>&1 || true
  grep -qE "Xvfb failed to start|cannot open a window" "$out/$mode.log" || break
  echo "Xvfb did not start (attempt $attempt); trying again"
  sleep 1
done
rc=$(cat "$out/$mode.rc" 2>/dev/null || echo "none (the app did not run)")
if [[ $rc != "$want_rc" ]]; then
  echo "the app exited $rc under Xvfb (want $want_rc):"
  cat "$out/$mode.log" "$out/$mode.xvfb.log" 2>/dev/null || true
  exit 1
fi
cat "$out/$mode.log"
"$checker" "$out/$mode.png" "$out/$mode.json" $width $height "${checks[@]}"
grep -q "\"tab\": \"$tab\"" "$out/$mode.json" || { echo "FAIL: --tab did not select the $tab tab"; exit 1; }

case $mode in
  chat)
    # The answer arrived and finished, and both messages are in the conversation.
    grep -Eq '^flashscope: answer: [1-9][0-9]* tokens' "$out/$mode.log" || { echo "FAIL: no finished answer"; exit 1; }
    grep -Eq '"messages": 2' "$out/$mode.json" || { echo "FAIL: the conversation does not hold the question and the answer"; exit 1; }
    # After the answer the app traced a prefill of the model's shape; nothing else was open, so it is shown.
    grep -q '"source": "chat capture"' "$out/$mode.json" || { echo "FAIL: no trace captured after the answer"; exit 1; }
    echo "answer check passed" ;;
  tokens)
    grep -Eq '"attention_layer": 16' "$out/$mode.json" || { echo "FAIL: the trace shown is not layer 16's"; exit 1; }
    grep -Eq '"token_labels": [1-9][0-9]*' "$out/$mode.json" || { echo "FAIL: no token labels on the map's axes"; exit 1; }
    # The answer's decode steps, one strip each: as many as the answer fed back (its tokens less the last).
    steps=$(grep -Eo '^flashscope: answer: [0-9]+ tokens' "$out/$mode.log" | grep -Eo '[0-9]+')
    grep -Eq "\"decode_steps\": $((steps - 1))[,}]" "$out/$mode.json" ||
      { echo "FAIL: the step strip does not show the answer's $((steps - 1)) decode steps"; exit 1; }
    # On the CUDA engine each strip is its step's own trace (the decode kernel, its split-KV plan);
    # the CPU engine's trace rows are its steps' own numbers, and it sends no step traces.
    own=0
    grep -q '^flashscope: model: .* on the CUDA engine' "$out/$mode.log" && own=$((steps - 1))
    grep -Eq "\"decode_steps_own_trace\": $own[,}]" "$out/$mode.json" ||
      { echo "FAIL: $own strips should come from their step's own trace"; exit 1; }
    # The per-head summary: every head of the layer (SmolLM2-135M: 9).
    grep -Eq '"head_summaries": 9[,}]' "$out/$mode.json" || { echo "FAIL: the summary row does not show layer 16's 9 heads"; exit 1; }
    echo "token view check passed" ;;
  lab|throughput)
    grep -Eq '^flashscope: kernel lab: ([5-9]|[1-9][0-9]+) runs' "$out/$mode.log" || { echo "FAIL: the lab did not run 5 times"; exit 1; }
    echo "lab check passed" ;;
  render)
    # The device card says in words why there is no GPU (or names it), not a raw status ("unsupported: …").
    note=$(grep -o '"device_note": "[^"]*"' "$out/$mode.json" || true)
    [[ $note =~ ^\"device_note\":\ \"[A-Z] && $note != *unsupported:* && $note != *query_device* ]] ||
      { echo "FAIL: the device card's note is not a sentence: $note"; exit 1; }
    echo "device card check passed: $note" ;;
  fit_lab_*)
    grep -q '"lab_fields_clipped": 0' "$out/$mode.json" ||
      { echo "FAIL: a kernel lab length field is too narrow for its largest value"; exit 1; }
    echo "lab fields check passed" ;;
  open_bad)
    grep -q "\"replay_error\": \"cannot open $out/no_such.fstrace" "$out/$mode.json" ||
      { echo "FAIL: the dialog did not try the typed path"; exit 1; }
    grep -q '"open_trace_buttons_visible": true' "$out/$mode.json" ||
      { echo "FAIL: the dialog's Open and Cancel buttons are out of view after the error"; exit 1; }
    echo "open dialog check passed" ;;
  keys)
    # Enter's press and release came between two frames: without the queue the frame never saw Enter.
    grep -q '"first_message": "What is 2+2?"' "$out/$mode.json" || { echo "FAIL: Enter did not send the question"; exit 1; }
    grep -q '"chat_input": "next"' "$out/$mode.json" ||
      { echo "FAIL: the text typed after Enter is not (alone) in the chat box"; exit 1; }
    grep -q '"quit": true' "$out/$mode.json" && grep -q '^flashscope: quit from the window' "$out/$mode.log" ||
      { echo "FAIL: Ctrl+Q did not quit while the chat box had the keyboard"; exit 1; }
    echo "keys check passed" ;;
  thinking)
    grep -Eq '"messages": 2' "$out/$mode.json" || { echo "FAIL: the conversation was not opened"; exit 1; }
    grep -q '"chat_format": "chatml"' "$out/$mode.json" || { echo "FAIL: no fallback to ChatML"; exit 1; }
    grep -q '"chat_notice": "the chat template file cannot be used (chat template 2:6: unsupported tag .include.); using built-in ChatML"' \
      "$out/$mode.json" || { echo "FAIL: the notice does not name the construct and its position"; exit 1; }
    echo "thinking check passed" ;;
  completion)
    grep -q '"chat_format": "transcript"' "$out/$mode.json" || { echo "FAIL: Gemma does not run as a transcript"; exit 1; }
    # llama.cpp (llama-cpp-python 0.3.36) answers "<bos>Question: What is the capital of France?\nAnswer:"
    # greedily on the same file with " Paris" and then "\nQuestion:", the stop string.
    grep -q '^flashscope: answer text:  Paris$' "$out/$mode.log" ||
      { echo "FAIL: the answer differs from llama.cpp's or did not stop at the next question"; exit 1; }
    echo "completion check passed" ;;
  models|base_model)
    # One row per installed model with its header's facts (the JSON writer
    # sorts keys: four before "file", three after).
    row() { grep -B4 -A3 "\"file\": \"$1\"" "$out/$mode.json"; }
    for fact in '"architecture": "llama"' '"chat_template": true' '"tokenizer": "BPE (GPT-2 style)"' \
                '"parameters": "135M"' '"context": 8192' '"weights": "Q4_1'; do
      row SmolLM2-135M-Instruct.Q4_1.gguf | grep -qF "$fact" || { echo "FAIL: the SmolLM2 row lacks $fact"; exit 1; }
    done
    for fact in '"architecture": "gemma3"' '"chat_template": false' '"tokenizer": "SentencePiece"' \
                '"parameters": "268M"' '"context": 32768' '"weights": "Q'; do
      row gemma-3-270m-q4_k_m.gguf | grep -qF "$fact" || { echo "FAIL: the Gemma row lacks $fact"; exit 1; }
    done
    if [[ $mode == models ]]; then
      grep -q "\"picker_error\": \".*$target: bad magic.*not a GGUF file" "$out/$mode.json" ||
        { echo "FAIL: the picker does not show why $target cannot be loaded"; exit 1; }
      grep -q '"model": "SmolLM2-135M-Instruct.Q4_1"' "$out/$mode.json" ||
        { echo "FAIL: SmolLM2 did not stay loaded after the failed switch"; exit 1; }
      grep -q '"chat_format": "template"' "$out/$mode.json" || { echo "FAIL: SmolLM2 runs without its template"; exit 1; }
    else
      grep -q '"model": "gemma-3-270m-q4_k_m"' "$out/$mode.json" ||
        { echo "FAIL: the switch to Gemma did not happen"; exit 1; }
      grep -q '"switch_error": ""' "$out/$mode.json" || { echo "FAIL: the switch reported an error"; exit 1; }
      # The load ran on the engine's thread: the window kept drawing meanwhile
      # (a load on the UI thread would leave no frame to see it in).
      grep -Eq '^flashscope: UI while the model switched: [1-9][0-9]* frames' "$out/$mode.log" ||
        { echo "FAIL: no frame was drawn while Gemma loaded"; exit 1; }
      grep -q '"chat_format": "transcript"' "$out/$mode.json" ||
        { echo "FAIL: Gemma does not run as a question-and-answer transcript"; exit 1; }
      grep -q '"chat_notice": "the model has no chat template: a question-and-answer transcript"' "$out/$mode.json" ||
        { echo "FAIL: the chat panel does not say it runs a transcript"; exit 1; }
      # The dashboard's example trace follows the new model's attention shape (Gemma-3-270M: 4 q-heads, 1 kv-head).
      grep -q "gemma-3-270m-q4_k_m's attention shape (4 q-heads / 1 kv-heads" "$out/$mode.json" ||
        { echo "FAIL: the example trace was not captured again for Gemma"; exit 1; }
    fi
    echo "model picker check passed" ;;
  replay_bad)
    grep -q -- "--replay: cannot open $out/bad.fstrace: corrupt data" "$out/$mode.log" ||
      { echo "FAIL: the bad trace's error is not reported on stderr"; exit 1; }
    grep -q '"replay_error": "cannot open .*corrupt data' "$out/$mode.json" ||
      { echo "FAIL: the bad trace's error is not in the window"; exit 1; }
    echo "bad replay check passed" ;;
esac
