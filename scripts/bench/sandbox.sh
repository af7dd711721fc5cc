#!/usr/bin/env bash
# The linux provider against bare spawns and the other isolators, side by side.
#   bash scripts/bench/sandbox.sh [RUNS] [ITERATIONS] [IDLE_SANDBOXES]
# 1. One hyperfine run, each a whole cold process: bare `true`, `cubby exec
#    -- true`, bubblewrap with every namespace, `unshare -Urmpn --fork`.
# 2. In one library process (examples/bench_sandbox.rs): a command through a
#    live sandbox vs a bare spawn, `run` of `true`, time to a ready sandbox,
#    memory per idle sandbox.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs="${1:-200}"
echo "machine: $(nproc) cores, $(uname -r)"
cargo build --quiet --release -p cubby-cli
cubby="${CARGO_TARGET_DIR:-$PWD/target}/release/cubby"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
hyperfine -N --warmup 20 --runs "$runs" \
  "/bin/true" \
  "$cubby exec -- /bin/true" \
  "bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp /bin/true" \
  "unshare -Urmpn --fork /bin/true"
cd - >/dev/null
cargo run --quiet --release -p cubby --example bench_sandbox -- "${2:-300}" "${3:-200}"
