#!/usr/bin/env bash
# The desktop app on a GPU machine that has no display and no X, GLFW, ImGui
# or Mesa packages: Debian's packages, carried as .deb files, are unpacked
# into a private prefix; the app is built against it; Xvfb (with Mesa's GLX
# in the server) gives it a screen, and the app's GLX context comes from the
# NVIDIA driver (__GLX_VENDOR_LIBRARY_NAME=nvidia). Each tab is rendered
# headless (--frames/--prompt/--run-lab with --screenshot) into OUT:
#   01-chat            an answer from the CUDA engine; the chat's live capture
#   02-tiles-hopper    attention tiles of a Hopper-kernel prefill captured now
#   03-softmax-hopper  the same trace's online softmax
#   04-pipeline-hopper its producer / consumer warp lanes and the SM chart
#   05-lab             the kernel lab looping on the GPU
#   06-pipeline-v6     the same prefill through v6
#   07-decode-paged    a paged-decode capture
# plus extras.tgz (logs, layouts, the traces, the decode tiles).
#
# usage (from the repository root):
#   scripts/gpu_app_screenshots.sh [--model GGUF] [--out DIR] [--cpu]
#   scripts/gpu_app_screenshots.sh --stash [--build-bg]
#   --stash     copy the carried parts (.device-carry/app*/) to /tmp/fsapp/parts
#               for a later call and exit; with --build-bg, when the build's
#               packages are there, also start building the app in the
#               background (a later run waits for it)
#   --cpu       no GPU: Mesa's llvmpipe, the CPU engine and a CPU build (to
#               test the unpack / Xvfb / screenshot flow on a machine without
#               a GPU); the trace tabs replay the H200 traces in assets/traces/
# Packages are read from .device-carry/app*/*.deb (app1: the build's and
# LLVM; app2: the X server, Mesa, fonts; app2/base: libraries an Ubuntu-like
# image has, used only where it lacks one) and /tmp/fsapp/parts.
# Environment: FSAPP_BUILD (build dir; default /tmp/fs/build when it holds a
# configured tree of this project, else /tmp/fsapp/build), JOBS (16).
set -uo pipefail
here=$PWD
cpu=0 stash=0 build_bg=0 build_only=0 model="" out=${OUT:-/tmp/fsapp/out}
while (($#)); do
  case $1 in
    --cpu) cpu=1 ;;
    --stash) stash=1 ;;
    --build-bg) build_bg=1 ;;
    --build-only) build_only=1 ;;  # what --build-bg runs
    --model) model=$2; shift ;;
    --out) out=$2; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
W=/tmp/fsapp
P=$W/prefix
mkdir -p "$W/parts/base" "$P/.debs" "$out"
say() { echo "== $*"; }
have() { for n in "$@"; do ls "$W/parts/$n"_*.deb >/dev/null 2>&1 || return 1; done; }

# 1. Packages: carried parts join the ones stashed by earlier calls.
for d in "$here"/.device-carry/app*/; do
  [[ -d $d ]] && cp -n "$d"*.deb "$W/parts/" 2>/dev/null
  [[ -d $d/base ]] && cp -n "$d"base/*.deb "$W/parts/base/" 2>/dev/null
done

# 2. The private prefix, one package at a time as parts arrive. Only the GL
# loaders (libglvnd) go into / as well, as the machine's notes say.
for f in "$W/parts"/*.deb "$W/parts/base"/*.deb; do
  [[ -f $f ]] || continue
  stamp=$P/.debs/${f##*/}
  [[ -f $stamp ]] && continue
  if [[ $f == */base/* ]]; then dpkg -x "$f" "$P/fallback"; else dpkg -x "$f" "$P"; fi || { echo "cannot unpack $f"; exit 1; }
  touch "$stamp"
done
# pkg-config files say prefix=/usr; point them at the prefix.
for pc in "$P"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$P"/usr/share/pkgconfig/*.pc; do
  [[ -f $pc ]] && sed -i "s|^prefix=/usr\$|prefix=$P/usr|; s|=/usr/|=$P/usr/|" "$pc"
done
if ((stash)); then
  say "stashed $(ls "$W/parts" "$W/parts/base" | grep -c deb) packages in $W/parts ($(du -sh "$W/parts" | cut -f1))"
  if ((build_bg)); then
    if have libglfw3-dev libimgui-dev libgl-dev; then
      rm -f "$W/build-bg.rc"
      cp "$0" "$W/build-bg.sh"
      setsid nohup bash "$W/build-bg.sh" --build-only $( ((cpu)) && echo --cpu) > "$W/build-bg.log" 2>&1 < /dev/null &
      echo $! > "$W/build-bg.pid"
      say "app build started in the background ($W/build-bg.log)"
    else
      echo "the build's packages (app1) are not here: no background build"
    fi
  fi
  exit 0
fi
if ((!cpu)) && ((!build_only)) && [[ $(id -u) == 0 ]]; then
  for f in "$W/parts"/{libglvnd0,libgl1,libglx0,libopengl0,libegl1,libgles2}_*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
LIB=$P/usr/lib/x86_64-linux-gnu
export LIBGL_DRIVERS_PATH=$LIB/dri
export XKB_CONFIG_ROOT=$P/usr/share/X11/xkb
# Library search: the carried libraries, the system's own, the fallback
# copies of base libraries, then the driver's folders (libGLX_nvidia).
ldp=$LIB:$P/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu
ldp=$ldp:$P/fallback/lib/x86_64-linux-gnu:$P/fallback/usr/lib/x86_64-linux-gnu
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [[ -d $d ]] && ldp=$ldp:$d; done
run_env=(env "LD_LIBRARY_PATH=$ldp")
if ((!build_only)); then
have xvfb libgl1-mesa-dri libllvm15 libglx-mesa0 libglfw3-dev libimgui-dev ||
  { echo "packages missing: carry .device-carry/app1 and app2 (or --stash them in an earlier call)"; exit 1; }
((cpu)) || ls /usr/local/nvidia/lib*/libGLX_nvidia* /usr/lib/x86_64-linux-gnu/libGLX_nvidia* 2>/dev/null | sed 's/^/NVIDIA GLX: /'
# The X server runs xkbcomp from /usr/bin, a path built into it: where none
# works there, a wrapper that runs the carried one (one new file in /).
if ! /usr/bin/xkbcomp -version >/dev/null 2>&1; then
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$ldp" "$P/usr/bin/xkbcomp" \
    > /usr/bin/xkbcomp && chmod +x /usr/bin/xkbcomp && say "xkbcomp: wrapper in /usr/bin over the carried one"
fi
say "what the carried libraries leave to the system (libc, libstdc++, libgcc; the base ones, else from $P/fallback):"
for b in "$P/usr/bin/Xvfb" "$LIB/libglfw.so.3" "$LIB/dri/swrast_dri.so" "$LIB/libGLX_mesa.so.0" "$P/usr/bin/xkbcomp"; do
  "${run_env[@]}" ldd "$b" | grep -v "$P/usr\|$P/lib" | grep -vE "linux-vdso|ld-linux" | awk -v b="${b##*/}" '{print "  " b ": " $1 " => " $3}'
done | sort -u
"${run_env[@]}" ldd "$P/usr/bin/Xvfb" "$LIB/dri/swrast_dri.so" "$LIB/libglfw.so.3" | grep "not found" && { echo "unresolved libraries"; exit 1; }
fi

# 3. Build the app and the CLI against the prefix.
if ((!build_only)) && [[ -f $W/build-bg.pid && ! -f $W/build-bg.rc ]] && kill -0 "$(cat "$W/build-bg.pid")" 2>/dev/null; then
  say "waiting for the background build"
  while kill -0 "$(cat "$W/build-bg.pid")" 2>/dev/null; do sleep 2; done
  say "background build: exit $(cat "$W/build-bg.rc" 2>/dev/null)"
fi
J=${JOBS:-16}
B=${FSAPP_BUILD:-}
if [[ -z $B ]]; then
  if ((!cpu)) && [[ -f /tmp/fs/build/CMakeCache.txt ]]; then B=/tmp/fs/build; else B=$W/build$( ((cpu)) && echo -cpu); fi
fi
# A build of its own compiles a copy of the tree: the next call replaces the
# working tree while a background build may still read it.
if [[ -f $B/CMakeCache.txt ]]; then
  src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$B/CMakeCache.txt")
else
  src=$W/src
fi
if [[ $src == "$W/src" ]]; then
  mkdir -p "$src" && tar -C "$here" --exclude=./.device-carry --exclude='./build*' --exclude=./.git --exclude=./assets/models \
    -cf - . | tar -C "$src" -xf -
fi
# nlohmann-json: the lead's /tmp/fs/prefix, or a copy of the carried one
# (the working tree may be replaced under a background build).
[[ -d $here/.device-carry/prefix && ! -d $W/deps ]] && cp -r "$here/.device-carry/prefix" "$W/deps"
prefixes="$P/usr"
for d in /tmp/fs/prefix "$W/deps"; do [[ -d $d ]] && prefixes="$prefixes;$d"; done
cfg=(-DFLASHSCOPE_BUILD_APP=ON "-DCMAKE_PREFIX_PATH=$prefixes"
     "-DFLASHSCOPE_IMGUI_BACKENDS_DIR=$P/usr/share/doc/libimgui-dev/examples/backends"
     "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$LIB")
if [[ ! -f $B/CMakeCache.txt ]]; then
  cfg+=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHSCOPE_BUILD_TESTS=OFF)
  if ((cpu)); then cfg+=(-DFLASHSCOPE_CUDA=OFF); else cfg+=(-DCMAKE_CUDA_ARCHITECTURES=90a); fi
  command -v ccache >/dev/null && cfg+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache
                                        -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
((build_only)) && echo $$ > "$W/build-bg.pid"
say "build: $B from $src (-j$J)"
t0=$SECONDS
blog=$W/build$( ((build_only)) && echo -bg-steps).log
[[ -d /tmp/fs/httplib/lib/pkgconfig ]] && export PKG_CONFIG_PATH=/tmp/fs/httplib/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
PKG_CONFIG_PATH="$LIB/pkgconfig:$P/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
  cmake -S "$src" -B "$B" "${cfg[@]}" > "$blog" 2>&1 &&
  ninja -C "$B" -j"$J" flashscope-app flashscope-cli >> "$blog" 2>&1
rc=$?
((build_only)) && { echo $rc > "$W/build-bg.rc"; exit $rc; }
grep -E "FlashScope app:" "$blog" | head -3
((rc == 0)) || { echo "build failed ($rc):"; grep -E "error|Error" "$blog" | head -30; tail -15 "$blog"; exit 1; }
say "built in $((SECONDS - t0)) s"
app=$B/app/flashscope cli=$B/cli/flashscope-cli
"${run_env[@]}" ldd "$app" | grep -E "glfw|libGL|libX11|not found" | sed 's/^/  app: /'

# 4. The traces the trace tabs show: captured now on the GPU by the CLI (the
# committed H200 ones with --cpu, or where a capture fails).
T=$W/traces && mkdir -p "$T"
shape=(--batch 2 --q-heads 16 --kv-heads 4 --q-len 4096 --kv-len 4096 --head-dim 128 --causal)
traces_from="this run's GPU captures"
if ((cpu)); then
  cp assets/traces/h200-hopper-prefill-causal.fstrace "$T/hopper.fstrace"
  cp assets/traces/h200-v6-prefill-causal.fstrace "$T/v6.fstrace"
  cp assets/traces/h200-paged-decode.fstrace "$T/decode.fstrace"
  traces_from="assets/traces/ (H200, committed)"
else
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | sed 's/^/GPU: /'
  for k in hopper v6; do
    "$cli" trace prefill --device cuda --kernel $k "${shape[@]}" --out "$T/$k.fstrace" > "$out/trace-$k.log" 2>&1 ||
      { echo "trace $k failed: $(tail -2 "$out/trace-$k.log")"; cp assets/traces/h200-$k-prefill-causal.fstrace "$T/$k.fstrace";
        traces_from="partly assets/traces/ (a capture failed)"; }
  done
  "$cli" trace decode --batch 8 --q-heads 32 --kv-heads 8 --context 8192 --head-dim 128 --out "$T/decode.fstrace" \
    > "$out/trace-decode.log" 2>&1 ||
    { echo "trace decode failed: $(tail -2 "$out/trace-decode.log")"; cp assets/traces/h200-paged-decode.fstrace "$T/decode.fstrace";
      traces_from="partly assets/traces/ (a capture failed)"; }
fi
say "traces: $traces_from"

# 5. Xvfb on a free display; Mesa's GLX serves it in the server.
d=91
while [[ -e /tmp/.X11-unix/X$d || -e /tmp/.X$d-lock ]]; do d=$((d + 1)); done
"${run_env[@]}" "$P/usr/bin/Xvfb" :$d -screen 0 1920x1200x24 -nolisten tcp -xkbdir "$XKB_CONFIG_ROOT" \
  > "$out/xvfb.log" 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null' EXIT
for _ in $(seq 50); do [[ -e /tmp/.X11-unix/X$d ]] && break; sleep 0.1; done
[[ -e /tmp/.X11-unix/X$d ]] || { echo "Xvfb did not start:"; cat "$out/xvfb.log"; exit 1; }
say "Xvfb on :$d"

# 6. The app, once per tab. It looks for its fonts under assets/fonts/ of the
# working folder: the carried DejaVu.
R=$W/run && mkdir -p "$R/assets" && ln -sfn "$P/usr/share/fonts/truetype/dejavu" "$R/assets/fonts"
app_env=("${run_env[@]}" DISPLAY=:$d)
((cpu)) || app_env+=(__GLX_VENDOR_LIBRARY_NAME=nvidia)
if [[ -z $model ]]; then
  for m in /tmp/models "$here/assets/models" /tmp/fs/src/assets/models; do
    [[ -f $m/SmolLM2-135M-Instruct.Q4_1.gguf ]] && { model=$m/SmolLM2-135M-Instruct.Q4_1.gguf; break; }
  done
fi
[[ -f $model ]] && model=$(realpath "$model") || echo "NO MODEL (--model GGUF): the chat is not shown"
shot() {  # name, app flags...
  local name=$1; shift
  [[ -f $model ]] && set -- --model "$model" "$@"
  (cd "$R" && timeout "${shot_timeout:-120}" "${app_env[@]}" "$app" --size 1600x1000 --scale 1 "$@" \
     --screenshot "$out/$name.png" --layout "$R/$name.json") > "$R/$name.log" 2>&1
  local rc=$?
  echo "-- $name (exit $rc)"; grep -E "^flashscope: " "$R/$name.log" | grep -v "wrote " | sed 's/^flashscope: /  /'
  ((rc == 0)) || tail -5 "$R/$name.log"
}
# A first frame tells whether the driver's GLX works on this X server; where
# it does not, the rest renders through Mesa (llvmpipe) so the GPU's engine,
# captures and lab still get their pictures, and the log says so loudly.
shot_timeout=45 shot 00-probe --tab attention --frames 3
if ((!cpu)) && ! grep -q "OpenGL .* on .*NVIDIA" "$R/00-probe.log"; then
  echo "GL FALLBACK: the NVIDIA GLX context failed on Xvfb; rendering with Mesa from here:"
  grep -iE "glx|opengl|window|error" "$R/00-probe.log" "$out/xvfb.log" | head -10
  app_env=("${run_env[@]}" DISPLAY=:$d)
fi
rm -f "$out/00-probe.png"
[[ -f $model ]] && shot 01-chat --tab attention --prompt "What is the capital of France? Answer in one sentence." --greedy \
  --max-tokens 64 --frames 3000
shot 02-tiles-hopper --replay "$T/hopper.fstrace" --tab attention --frames 12
shot 03-softmax-hopper --replay "$T/hopper.fstrace" --tab softmax --frames 12
shot 04-pipeline-hopper --replay "$T/hopper.fstrace" --tab pipeline --frames 12
shot 05-lab --tab lab --run-lab --frames 1500
shot 06-pipeline-v6 --replay "$T/v6.fstrace" --tab pipeline --frames 12
shot 07-decode-paged --replay "$T/decode.fstrace" --tab pipeline --frames 12
shot decode-tiles --replay "$T/decode.fstrace" --tab attention --frames 12
shot throughput --tab throughput --run-lab --frames 1500

# 7. What the window and the engine ran on.
say "OpenGL the app saw: $(grep -ho "OpenGL .* on .*" "$R/01-chat.log" | head -1)"
say "engine: $(grep -ho "model: .*" "$R/01-chat.log" | head -1)"
gl=$(grep -ho "OpenGL .* on .*" "$R"/0*.log | sort -u)
if ((!cpu)) && ! grep -q "NVIDIA" <<<"$gl"; then echo "FAIL: the window's OpenGL is not NVIDIA's: $gl"; fi
if ((!cpu)) && grep -q " engine$" "$R/01-chat.log" && ! grep -q "on the CUDA engine" "$R/01-chat.log"; then echo "FAIL: the chat did not run on the CUDA engine"; fi
mv "$out/decode-tiles.png" "$out/throughput.png" "$R/" 2>/dev/null
cp "$W"/build*.log "$out"/trace-*.log "$out/xvfb.log" "$R/" 2>/dev/null
rm -f "$out"/trace-*.log "$out/xvfb.log"
tar czf "$out/extras.tgz" -C "$W" run traces 2>/dev/null
ls -la "$out"
