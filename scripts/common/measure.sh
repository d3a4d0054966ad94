# Sourced by the benchmarks that time whole refscore commands
# (scripts/bench/report.sh, scripts/bench/calibration.sh).
#
# measure LABEL COMMAND...: runs COMMAND once under /usr/bin/time and prints a
# table row with its wall seconds and peak RSS (MiB); needs $dir (a scratch
# folder) set by the caller.
measure() {
  local label="$1"; shift
  /usr/bin/time -f "%e %M" -o "$dir/time" "$@" >/dev/null
  read -r secs kib <"$dir/time"
  printf '| %s | %s s | %.1f MiB |\n' "$label" "$secs" "$(echo "$kib / 1024" | bc -l)"
}

# The CPU the figures come from, as the brief asks next to every figure.
cpu_line() {
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')"
}
