#!/usr/bin/env bash
# A call through cubby's upstream vs the same call made to that server
# directly, side by side in one run: `echo` of the reference server
# @modelcontextprotocol/server-everything over stdio, one call at a time.
#
# Usage: bash scripts/bench/upstream.sh [upstream_client.py options]
#   e.g. bash scripts/bench/upstream.sh --calls 1000 --rounds 3
#
# Environment:
#   CUBBY_BENCH_CUBBY     a cubby binary to measure instead of building
#                         target/release/cubby.
#   CUBBY_BENCH_PROVIDER  the provider the upstream's sandbox comes from
#                         (default linux).
#
# The server is installed (pinned) into target/mcp-upstream, where the
# tests install it. Both paths start node on the package's entry point; the
# cubby path is `cubby mcp` with `[upstream.every]` running that command in
# its sandbox. Figures: median and p99 latency per call, their ratio and
# the microseconds cubby adds.
set -euo pipefail
PACKAGE=@modelcontextprotocol/server-everything@2026.8.31
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
dir=$repo/target/mcp-upstream
entry=$dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js
if [[ ! -f $entry ]]; then
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error "$PACKAGE" >&2
fi
if [[ -n ${CUBBY_BENCH_CUBBY:-} ]]; then
  cubby=$CUBBY_BENCH_CUBBY
else
  cargo build --release --locked -p cubby-cli >&2
  cubby=$repo/target/release/cubby
fi
node=$(command -v node)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws"
cat >"$work/cubby.toml" <<TOML
[upstream.every]
command = ["$node", "$entry", "stdio"]
tools = ["echo"]
TOML
echo "load: $(cut -d' ' -f1-3 /proc/loadavg); provider ${CUBBY_BENCH_PROVIDER:-linux}"
python3 "$repo/scripts/bench/upstream_client.py" \
  --direct "$node $entry stdio" \
  --cubby "$cubby mcp --root $work/ws --config $work/cubby.toml --provider ${CUBBY_BENCH_PROVIDER:-linux}" \
  --tool echo --label every "$@"
