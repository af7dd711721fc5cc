#!/usr/bin/env python3
"""A call through cubby's upstream vs the same call made to that server
directly (stdlib only; used by scripts/bench/upstream.sh).

Usage:
  python3 scripts/bench/upstream_client.py --direct 'node …/index.js stdio' \
      --cubby 'cubby mcp --root WS --config CFG' --tool echo --label every \
      [--calls 1000] [--rounds 3] [--warmup 100] [--json OUT]

Per round, the direct server first, then cubby, each a fresh process:
`initialize` + `notifications/initialized`, a warmup, then --calls
`tools/call`s one at a time (send, wait for the answer, send the next) with
arguments {"message": "hello"}. Every answer must be a result that is not
`isError` and carries "hello". Prints the median latency per call of each,
their ratio and the microseconds cubby adds per call.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

PROTOCOL_VERSION = "2025-11-25"


class Server:
    def __init__(self, command):
        self.proc = subprocess.Popen(
            shlex.split(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0

    def request(self, method, params):
        self.next_id += 1
        mid = self.next_id
        line = json.dumps({"jsonrpc": "2.0", "id": mid, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        while True:
            raw = self.proc.stdout.readline()
            if not raw:
                raise SystemExit(f"the server closed its output (request {method})")
            msg = json.loads(raw)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise SystemExit(f"{method}: {msg['error']}")
                return msg["result"]

    def notify(self, method):
        line = json.dumps({"jsonrpc": "2.0", "method": method})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measure(command, tool, calls, warmup):
    server = Server(command)
    server.request(
        "initialize",
        {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "upstream-bench", "version": "1"},
        },
    )
    server.notify("notifications/initialized")
    args = {"name": tool, "arguments": {"message": "hello"}}
    for _ in range(warmup):
        server.request("tools/call", args)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        result = server.request("tools/call", args)
        times.append(time.perf_counter() - start)
        text = "".join(c.get("text", "") for c in result.get("content", []))
        if result.get("isError") or "hello" not in text:
            raise SystemExit(f"{tool}: unexpected answer {result}")
    server.close()
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--direct", required=True)
    p.add_argument("--cubby", required=True)
    p.add_argument("--tool", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--calls", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--relay", action="store_true",
                   help="also measure the direct command behind a bare stdio relay process")
    p.add_argument("--json")
    a = p.parse_args()
    direct, through, relayed = [], [], []
    relay = f"{sys.executable} {os.path.join(os.path.dirname(os.path.abspath(__file__)), 'stdio_relay.py')} {a.direct}"
    for _ in range(a.rounds):
        direct += measure(a.direct, a.tool, a.calls, a.warmup)
        if a.relay:
            relayed += measure(relay, a.tool, a.calls, a.warmup)
        through += measure(a.cubby, f"{a.label}__{a.tool}", a.calls, a.warmup)
    d = statistics.median(direct) * 1e6
    c = statistics.median(through) * 1e6
    d99 = statistics.quantiles(direct, n=100)[98] * 1e6
    c99 = statistics.quantiles(through, n=100)[98] * 1e6
    print(f"{'':<22}{'p50 µs':>10}{'p99 µs':>10}")
    print(f"{'direct':<22}{d:>10.0f}{d99:>10.0f}")
    if relayed:
        r = statistics.median(relayed) * 1e6
        r99 = statistics.quantiles(relayed, n=100)[98] * 1e6
        print(f"{'through a bare relay':<22}{r:>10.0f}{r99:>10.0f}")
    print(f"{'through cubby':<22}{c:>10.0f}{c99:>10.0f}")
    print(f"ratio (p50): {c / d:.2f}x; added per call: {c - d:.0f} µs")
    if relayed:
        print(f"the bare relay adds {r - d:.0f} µs (ratio {r / d:.2f}x)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"direct_us": d, "cubby_us": c, "direct_p99_us": d99, "cubby_p99_us": c99}, f)


if __name__ == "__main__":
    sys.exit(main())
