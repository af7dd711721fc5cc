#!/usr/bin/env bash
# Scale of one `cubby serve --host` (issue 18): idle sandboxes' memory,
# create -> first output latency with many alive, commands/s under
# concurrent clients, and no process left after destroy.
#   bash scripts/bench/host_scale.sh [host_scale.py options]
#   e.g. bash scripts/bench/host_scale.sh --idle 1000 --clients 100 --seconds 10
# Builds the release binary (or uses CUBBY_BENCH_CUBBY) and runs the driver.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin="${CUBBY_BENCH_CUBBY:-}"
if [ -z "$bin" ]; then
  (cd "$repo" && cargo build --release --locked -p cubby-cli >&2)
  bin="$repo/target/release/cubby"
fi
echo "host_scale: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg) $(nproc) cores"
exec python3 "$repo/scripts/bench/host_scale.py" "$bin" "$@"
