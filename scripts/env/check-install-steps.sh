#!/usr/bin/env bash
# Checks that the project's install steps cannot race for apt's locks, as they
# once did on a fresh machine (a background `apt-get install cmake` beside a
# foreground `apt-get update`: "Could not get lock", exit 100).
#
# It runs scripts/env/system-deps.sh as on a fresh machine: dpkg's state is an empty
# folder (nothing installed), and apt-get is a stand-in that behaves like the
# real one where it matters: it takes apt's lock without waiting and fails with
# apt's own message when another apt-get holds it, holds the lock for a while,
# and marks the packages installed in that state. Checked:
#   1. no script but scripts/env/system-deps.sh calls apt-get;
#   2. a fresh machine gets one `update` and one `install` of every package;
#      a second run installs nothing;
#   3. two installers started at once both succeed, one after the other;
#   4. with REFSCORE_APT=never (how scripts/test.sh runs its background jobs)
#      a missing package is an error and apt-get is never called.
# Takes a few seconds; touches nothing outside a temporary folder.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
fail() { printf 'check-install-steps: FAILED: %s\n' "$*" >&2; exit 1; }

# 1. Every apt-get call goes through the one installer.
strays="$(grep -rn --include='*.sh' --include='*.py' --include='run' \
  -E 'apt-get([[:space:]]+-[^[:space:]]+)*[[:space:]]+(update|install|upgrade|dist-upgrade|remove|purge)|[(]apt-get[)]|apt_get' \
  scripts .ci tests crates 2>/dev/null \
  | grep -v -E '^scripts/env/(system-deps|check-install-steps)\.sh:' \
  | grep -v -E '^[^:]+:[0-9]+:[[:space:]]*#' || true)"
[ -z "$strays" ] || fail "apt-get called outside scripts/env/system-deps.sh:
$strays"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fake="$work/apt-get"
cat >"$fake" <<'FAKE'
#!/usr/bin/env bash
# A stand-in apt-get: apt's non-waiting lock, apt's message, dpkg state updated.
set -euo pipefail
state="$REFSCORE_DPKG_ADMINDIR"
exec 7>>"$state/apt.lock"
if ! flock -n 7; then
  echo "E: Could not get lock $state/apt.lock. It is held by another apt-get" >&2
  echo "overlap" >>"$state/calls"
  exit 100
fi
cmd=""
pkgs=()
for a in "$@"; do
  case "$a" in
    -o|-y|-qq|-q) ;;
    *=*) ;;
    update|install) cmd="$a" ;;
    *) [ -n "$cmd" ] && pkgs+=("$a") ;;
  esac
done
echo "$cmd ${pkgs[*]}" >>"$state/calls"
sleep 1
for p in "${pkgs[@]}"; do
  printf 'Package: %s\nStatus: install ok installed\nVersion: 1\nArchitecture: all\nMaintainer: x\nDescription: x\n\n' "$p" >>"$state/status"
done
FAKE
chmod +x "$fake"

fresh() {
  local dir="$work/$1"
  mkdir -p "$dir/info" "$dir/updates"
  : >"$dir/status"
  : >"$dir/calls"
  echo "$dir"
}
deps() {
  local dir="$1"
  shift
  REFSCORE_DPKG_ADMINDIR="$dir" REFSCORE_APT_GET="$fake" REFSCORE_APT_LOCK="$dir/refscore.lock" \
    scripts/env/system-deps.sh "$@"
}

# 2. A fresh machine: one update, one install of everything; then nothing.
state="$(fresh one)"
deps "$state" --all 2>"$work/log" || { cat "$work/log" >&2; fail "the install failed on a fresh state"; }
calls="$(cat "$state/calls")"
[ "$calls" = "update 
install cmake chromium curl openjdk-17-jre-headless" ] || fail "expected one update and one install of cmake chromium curl openjdk-17-jre-headless, saw:
$calls"
deps "$state" --all 2>"$work/log" || fail "a second run failed"
[ "$(wc -l <"$state/calls")" = 2 ] || fail "a second run called apt-get again"

# 3. Two installers at once (the race of the fresh-machine issue).
state="$(fresh two)"
deps "$state" cmake 2>"$work/a" &
a=$!
deps "$state" --all 2>"$work/b" &
b=$!
wait "$a" || { cat "$work/a" >&2; fail "the first of two concurrent installers failed"; }
wait "$b" || { cat "$work/b" >&2; fail "the second of two concurrent installers failed"; }
if grep -q overlap "$state/calls"; then
  fail "two apt-get processes overlapped: $(tr '\n' ';' <"$state/calls")"
fi

# 4. Background jobs may not install.
state="$(fresh three)"
if REFSCORE_APT=never deps "$state" cmake 2>"$work/log"; then
  fail "REFSCORE_APT=never installed a missing package"
fi
grep -q 'missing Debian packages: cmake' "$work/log" || fail "REFSCORE_APT=never gave no clear error: $(cat "$work/log")"
[ ! -s "$state/calls" ] || fail "REFSCORE_APT=never still called apt-get"

echo "check-install-steps: ok (one installer, one update + one install on a fresh state, concurrent callers serialised, background refused)"
