#!/usr/bin/env bash
# Fetches, on a Debian 12 amd64 machine with network, the packages that
# scripts/gpu_app_screenshots.sh unpacks on a GPU machine that has neither X
# nor a package mirror, split into two folders that each fit one carry:
#   DEST/app1   what the build needs (GLFW, Dear ImGui, stb, the GL loaders
#               and headers, libX11) and LLVM for Mesa
#   DEST/app2   Xvfb, xkb data and xkbcomp, Mesa (the X server's GLX, and
#               llvmpipe for --cpu), DejaVu fonts, the rest of the closure
#   DEST/app2/base  libraries an Ubuntu-like image has anyway (libsystemd0,
#               libgcrypt20, zlib1g...), used only where it lacks one
# The closure is apt's own (a simulated install on an empty system), less
# libc, libstdc++ and libgcc, which the GPU machine's compiler needs anyway.
# usage: scripts/fetch_gpu_app_debs.sh [DEST]   (default .device-carry)
set -euo pipefail
dest=$(realpath -m "${1:-.device-carry}")
top="xvfb xserver-common x11-xkb-utils xkb-data libgl1-mesa-dri libglx-mesa0 libglapi-mesa libgl1 libglx0 libglvnd0
     libopengl0 libegl1 libgles2 libglfw3 libglfw3-dev libimgui-dev libstb-dev libstb0 libgl-dev libglx-dev
     libopengl-dev fonts-dejavu-core"
system="gcc-12-base libc6 libgcc-s1 libstdc++6 lsb-base sysvinit-utils x11-common"
base="zlib1g libselinux1 libpcre2-8-0 libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1
      libaudit1 libaudit-common libcap-ng0 libbz2-1.0 libtinfo6 libuuid1"
build="libllvm15 libz3-4 libglfw3 libglfw3-dev libimgui-dev libstb-dev libstb0 libgl-dev libglx-dev libopengl-dev
       libx11-dev libxau-dev libxdmcp-dev libxcb1-dev x11proto-dev xtrans-dev libpthread-stubs0-dev xorg-sgml-doctools
       libgl1 libglx0 libglvnd0 libopengl0 libx11-6 libx11-data libxcb1 libxau6 libxdmcp6 libbsd0 libmd0"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: > "$tmp/status"
# shellcheck disable=SC2086
apt-get -s -o Dir::State::status="$tmp/status" install --no-install-recommends $top | awk '/^Inst /{print $2}' > "$tmp/all"
in_list() { [[ " $(echo $2) " == *" $1 "* ]]; }
rm -rf "$dest/app1" "$dest/app2"
mkdir -p "$dest/app1" "$dest/app2/base"
while read -r pkg; do
  if in_list "$pkg" "$system"; then continue
  elif in_list "$pkg" "$base"; then d=$dest/app2/base
  elif in_list "$pkg" "$build"; then d=$dest/app1
  else d=$dest/app2; fi
  (cd "$d" && apt-get download "$pkg" >/dev/null 2>&1) || { echo "cannot download $pkg" >&2; exit 1; }
done < "$tmp/all"
# File names in letters, digits, '.', '_' and '-' only (no %3a for an epoch):
# what every transfer keeps as it is.
for f in "$dest"/app1/*.deb "$dest"/app2/*.deb "$dest"/app2/base/*.deb; do
  n=$(dirname "$f")/$(basename "$f" | sed 's/[^A-Za-z0-9._-]/-/g')
  [[ $f == "$n" ]] || mv "$f" "$n"
done
du -sb "$dest/app1" "$dest/app2"
