#!/usr/bin/env bash
# The app's headless test: renders the real window under Xvfb (Mesa's
# software OpenGL) and checks the screenshot.
#   render  a few frames on the Attention tiles tab; needs no model
#   chat    sends a prompt to the default model and renders until the
#           answer is complete; then the answer and the picture are checked
# Exit 77 (ctest: skipped) when xvfb-run/xauth or, for chat, the model is missing.
#
# usage: run_headless.sh render|chat APP CHECKER OUTDIR SOURCE_DIR
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
args=(--size ${width}x${height} --scale 1)
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
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac

mkdir -p "$out"
rm -f "$out/$mode.png" "$out/$mode.json"
# A screen larger than the window, so none of it is off-screen.
if ! xvfb-run -a -e "$out/$mode.xvfb.log" -s "-screen 0 1920x1200x24" \
    "$app" "${args[@]}" --screenshot "$out/$mode.png" --layout "$out/$mode.json" >"$out/$mode.log" 2>&1; then
  echo "the app failed under Xvfb:"
  cat "$out/$mode.log" "$out/$mode.xvfb.log" 2>/dev/null || true
  exit 1
fi
cat "$out/$mode.log"
"$checker" "$out/$mode.png" "$out/$mode.json" $width $height
grep -q "\"tab\": \"$tab\"" "$out/$mode.json" || { echo "FAIL: --tab did not select the $tab tab"; exit 1; }

if [[ $mode == chat ]]; then
  # The answer arrived and finished, and both messages are in the conversation.
  grep -Eq '^flashscope: answer: [1-9][0-9]* tokens' "$out/$mode.log" || { echo "FAIL: no finished answer"; exit 1; }
  grep -Eq '"messages": 2' "$out/$mode.json" || { echo "FAIL: the conversation does not hold the question and the answer"; exit 1; }
  echo "answer check passed"
fi
