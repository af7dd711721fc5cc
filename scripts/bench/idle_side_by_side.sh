#!/usr/bin/env bash
# The idle-sandbox memory of builds side by side:
#   ROUNDS=5 bash scripts/bench/idle_side_by_side.sh DIR...
# Each DIR holds a release `bench_sandbox` (the example). Runs
# `bench_sandbox ITERATIONS IDLE` (default 300 200) of each build in turn,
# ROUNDS times (one build after the other within a round, so that the
# neighbours' load falls on all of them alike), and prints for each build
# the median and the range of part 3's figures: KiB per idle sandbox, PSS
# of the sandboxes' processes and the server's growth (MiB).
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: ROUNDS=5 [ARGS='300 200'] $0 DIR..." >&2; exit 2; }
rounds="${ROUNDS:-5}"
read -r -a args <<<"${ARGS:-300 200}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "start $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg); bench_sandbox ${args[*]}, $rounds rounds"
for r in $(seq "$rounds"); do
  for i in $(seq 0 $(($# - 1))); do
    d="${@:$((i + 1)):1}"
    "$d/bench_sandbox" "${args[@]}" >"$work/$i.$r" 2>&1
    grep -m1 'PSS of their' "$work/$i.$r" >>"$work/$i.lines"
  done
done
echo "end $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
for d in "$@"; do
  python3 - "$d" "$work/$i.lines" <<'PY'
import re, statistics, sys
rows = [re.search(r"processes \(\d+ address spaces\) ([\d.]+) MiB \+ server growth ([\d.]+) MiB = ([\d.]+) KiB", l).groups()
        for l in open(sys.argv[2])]
cols = list(zip(*[[float(x) for x in r] for r in rows]))
show = lambda c: f"{statistics.median(c):.1f} ({min(c):.1f}-{max(c):.1f})"
print(f"  {show(cols[2])} KiB per sandbox; PSS {show(cols[0])} MiB; server growth {show(cols[1])} MiB  {sys.argv[1]}")
PY
  i=$((i + 1))
done
