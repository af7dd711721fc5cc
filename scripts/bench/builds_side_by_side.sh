#!/usr/bin/env bash
# Two builds of cubby side by side in one run, on the four benchmarks a
# restructure must not slow down (sandbox start, run, MCP calls, search):
#   bash scripts/bench/builds_side_by_side.sh OLD NEW
# OLD and NEW each hold release binaries `cubby`, `bench_sandbox` and
# `bench_run` (cargo build --release -p cubby-cli -p cubby --examples, then
# copy target/release/{cubby,examples/bench_sandbox,examples/bench_run}).
#   1. sandbox: scripts/bench/sandbox_side_by_side.sh OLD NEW (hyperfine of
#      `cubby exec -- /bin/true` of each and bubblewrap, interleaved rounds,
#      bench_sandbox of each);
#   2. run: bench_run of each, alternately, twice (`run` vs a bare spawn,
#      1 GiB of output through `run`);
#   3. MCP: scripts/bench/mcp.sh with NEW as cubby and OLD as its baseline
#      (both against the reference filesystem server, alternately);
#   4. search: scripts/bench/search.sh with NEW, OLD and ripgrep in one
#      hyperfine run.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OLD NEW" >&2; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
for d in "$old" "$new"; do
  for b in cubby bench_sandbox bench_run; do
    [ -x "$d/$b" ] || { echo "$0: $d/$b missing" >&2; exit 2; }
  done
done
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
echo "## sandbox (load $(cut -d' ' -f1-3 /proc/loadavg))"
bash "$here/sandbox_side_by_side.sh" "$old" "$new"
echo
echo "## run"
for round in 1 2; do
  for d in "$old" "$new"; do
    echo "### round $round: $d"
    "$d/bench_run" 300 1024
  done
done
echo
echo "## MCP"
CUBBY_BENCH_CUBBY=$new/cubby CUBBY_BENCH_BASELINE=$old/cubby bash "$here/mcp.sh" --rounds 3 --repeat 3
echo
echo "## search"
CUBBY_BENCH_CUBBY=$new/cubby CUBBY_BENCH_BASELINE=$old/cubby bash "$here/search.sh"
