#!/usr/bin/env bash
# The one place refscore's scripts install Debian packages. A fresh machine has
# only Rust, Python and git; the tests also need:
#
#   cmake     builds the local llama.cpp judge (scripts/env/judge-server.sh)
#   chromium  renders the report page in its test (tests/report.rs)
#   curl      health checks of the local judge (usually there already)
#   openjdk-17-jre-headless  Java 17 for the Spark tests (tests/python/test_spark.py;
#             usually there already: pyspark 4 needs Java 17 or later)
#
# Usage:
#   scripts/env/system-deps.sh PACKAGE...   install those of PACKAGE that are missing
#   scripts/env/system-deps.sh --all        the whole list above (what scripts/test.sh does)
#
# Why one place: apt-get holds a lock on its package lists and on dpkg, and two
# apt-get processes at once make the second fail ("Could not get lock"). So:
#   - every apt-get call in the project is here (scripts/env/check-install-steps.sh
#     fails the tests if another script calls apt-get);
#   - one `apt-get update` and one `apt-get install` for everything missing, both
#     under an exclusive flock of $REFSCORE_APT_LOCK, so two refscore callers
#     take turns instead of racing;
#   - apt-get itself waits up to 10 minutes for a lock held by anyone else (an
#     unattended upgrade): DPkg::Lock::Timeout for dpkg, and a retry loop for the
#     lists lock of `apt-get update`, which that option does not cover (apt 2.6:
#     `update` fails at once on a held lists lock whatever the timeout);
#   - REFSCORE_APT=never makes a missing package an error instead of an install:
#     scripts/test.sh sets it for its background jobs, which therefore never call
#     apt-get at all.
#
# Environment (tests):
#   REFSCORE_APT=never        refuse to install; exit 1 naming what is missing
#   REFSCORE_APT_GET          the apt-get to run (default apt-get, or sudo apt-get)
#   REFSCORE_DPKG_ADMINDIR    dpkg's state folder for "is it installed" (default
#                             /var/lib/dpkg); an empty folder looks like a fresh machine
#   REFSCORE_APT_LOCK         the lock file (default /tmp/refscore-apt.lock)
set -euo pipefail

readonly ALL=(cmake chromium curl openjdk-17-jre-headless)
log() { printf 'system-deps: %s\n' "$*" >&2; }
die() { printf 'system-deps: error: %s\n' "$*" >&2; exit 1; }

admindir="${REFSCORE_DPKG_ADMINDIR:-/var/lib/dpkg}"
lock="${REFSCORE_APT_LOCK:-/tmp/refscore-apt.lock}"
if [ -n "${REFSCORE_APT_GET:-}" ]; then
  read -r -a apt_get <<<"$REFSCORE_APT_GET"
elif [ "$(id -u)" = 0 ]; then
  apt_get=(apt-get)
else
  apt_get=(sudo apt-get)
fi

installed() {
  dpkg-query --admindir="$admindir" -W -f='${Status}' "$1" 2>/dev/null | grep -q ' installed$'
}

missing_of() {
  local p
  for p in "$@"; do
    installed "$p" || printf '%s\n' "$p"
  done
}

[ $# -gt 0 ] || die "usage: scripts/env/system-deps.sh PACKAGE... | --all"
if [ "$1" = --all ]; then
  set -- "${ALL[@]}"
fi

mapfile -t missing < <(missing_of "$@")
[ ${#missing[@]} -gt 0 ] || exit 0
if [ "${REFSCORE_APT:-}" = never ]; then
  die "missing Debian packages: ${missing[*]} (this caller may not install them; run scripts/env/system-deps.sh ${missing[*]} first)"
fi

exec 9>>"$lock"
flock 9
# Another caller may have installed them while we waited for the lock.
mapfile -t missing < <(missing_of "${missing[@]}")
[ ${#missing[@]} -gt 0 ] || exit 0

log "installing ${missing[*]} (Debian packages; about a minute, chromium is ~100 MB)"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for try in $(seq 1 60); do
  if "${apt_get[@]}" -o DPkg::Lock::Timeout=600 update -qq >"$out" 2>&1; then
    break
  fi
  if ! grep -q 'Could not get lock' "$out" || [ "$try" = 60 ]; then
    cat "$out" >&2
    die "updating the package lists failed"
  fi
  sleep 10
done
if ! DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" -o DPkg::Lock::Timeout=600 \
    install -y -qq "${missing[@]}" >"$out" 2>&1; then
  cat "$out" >&2
  die "installing ${missing[*]} failed"
fi
mapfile -t still < <(missing_of "${missing[@]}")
[ ${#still[@]} -eq 0 ] || die "the installer reported success but ${still[*]} is not installed"
log "installed ${missing[*]}"
