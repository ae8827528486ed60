#!/usr/bin/env bash
# Installs the Debian packages FlashScope builds with, only those missing.
# The CUDA toolkit is optional and never installed here: when nvcc is present
# (on PATH or in /usr/local/cuda/bin) the CUDA backend is built, else the CPU path.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config python3 doctest-dev nlohmann-json3-dev)
# Line editing and history in `flashscope-cli chat` (optional: plain lines without it).
packages+=(libedit-dev)
# `flashscope-cli serve`: the HTTP server library (without it the CLI has no
# serve); its tests use curl for the raw events and a venv for the official
# `openai` client (python3-venv; scripts/test.sh installs the package).
packages+=(libcpp-httplib-dev curl python3-venv)
# The desktop app: window, UI and GL (libglfw3-dev, libimgui-dev with its
# GLFW/OpenGL 3 backends, libstb-dev for PNG, libgl-dev), its font
# (fonts-dejavu-core), and its headless test: an X server without a display
# (xvfb, with xauth for xvfb-run) and Mesa's software OpenGL (libgl1-mesa-dri).
packages+=(libglfw3-dev libimgui-dev libstb-dev libgl-dev fonts-dejavu-core xvfb xauth libgl1-mesa-dri)
# The fuzz harnesses (scripts/fuzz.sh, tests/fuzz/): clang, and libFuzzer
# with the sanitizer runtimes (libclang_rt.fuzzer is in libclang-rt-14-dev).
packages+=(clang-14 libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
