#!/usr/bin/env bash
# `run` through the library vs a bare spawn, and 1 GiB of output through
# `run` vs the same command writing to /dev/null — side by side, one process.
#   bash scripts/bench/run.sh [ITERATIONS] [OUTPUT_MIB]
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "machine: $(nproc) cores, $(uname -r)"
cargo run --quiet --release -p cubby --example bench_run -- "${1:-500}" "${2:-1024}"
