#!/usr/bin/env bash
# Ergonomics benchmark (issue 14, item 5): the bytes the model receives for
# the same operations on the same files — read a 200-line file, a search
# with 10 matches, list a directory of 50 entries, a failed edit, a command
# printing 10 KB — from cubby's text (the default), from cubby with
# `[mcp] structured_content = true`, and from the MCP reference filesystem
# server (@modelcontextprotocol/server-filesystem 2026.8.31), each as Codex
# CLI 0.171.0 and Claude Code 2.1.332 pass the results on to the model.
#
# Usage: bash scripts/bench/ergonomics.sh
#
# It runs the ignored test `ergonomics` of crates/cubby-cli/tests/mcp_clients.rs:
# the real clients (installed, pinned, into target/mcp-clients) drive each
# server over stdio against the scripted fake model of
# tests/common/fake_model.rs, which records what each client sent back for
# every tool result. The figure is the bytes of that result's text parts
# (plus any image's base64) as the model reads them: Codex's `Wall time: …
# Output:` lines included, JSON escapes counted as they are sent.
#
# Output: the Markdown table on stdout and in target/ergonomics/table.md;
# every result's text in target/ergonomics/<client>-<server>-<operation>.txt.
# Needs cargo, node >= 20 and npm (the registry, for the first install).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
out=$repo/target/ergonomics
mkdir -p "$out"
cargo test -p cubby-cli --test mcp_clients --locked -- \
  --ignored --exact ergonomics --nocapture --test-threads=1 | tee "$out/run.log"
grep '^|' "$out/run.log" > "$out/table.md"
echo
cat "$out/table.md"
