#!/usr/bin/env bash
# Microsoft's Azure Storage emulator, Azurite, from the npm registry, for the
# object-store tests (tests/python/test_object_store.py): installed once
# under the cache and checked by its version; prints the azurite-blob path.
set -euo pipefail
version=3.37.0
dir="${REFSCORE_AZURITE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/refscore/azurite}"
bin="$dir/node_modules/.bin/azurite-blob"
if [ ! -x "$bin" ] || [ "$(cat "$dir/.version" 2>/dev/null)" != "$version" ]; then
  command -v npm >/dev/null || { echo "azurite.sh: npm is missing (Node.js 20 comes with the machine)" >&2; exit 1; }
  mkdir -p "$dir"
  npm install --no-audit --no-fund --loglevel=error --prefix "$dir" "azurite@$version" >&2
  echo "$version" >"$dir/.version"
fi
echo "$bin"
