#!/usr/bin/env python3
"""Raw JSON-RPC benchmark client for MCP servers over stdio (stdlib only).

Usage:
  python3 scripts/bench/mcp_client.py --fixture DIR \
      --reference 'node .../server-filesystem/dist/index.js DIR' \
      --cubby 'target/release/cubby mcp --root DIR --provider local' \
      [--reads 1000] [--lists 100] [--rounds 3] [--repeat 3] [--warmup 200]
      [--json OUT] [--enforce-targets]

Each server command is split with shlex and started directly (no shell), so
the pid we sample is the server itself (give node the package's entry point,
not npx). Per round and per server, in a fresh process:

  1. `initialize` (protocolVersion 2025-11-25) + `notifications/initialized`;
  2. warmup: --warmup pipelined reads and --warmup/10 listings (not timed);
  3. timed workloads, in this order, each run --repeat times:
       read-seq   --reads  `tools/call` reads, one at a time (send, wait for
                  the answer, send the next) -- the issue's "sequential";
       read-pipe  the same --reads calls pipelined: one thread writes every
                  request line, another reads the answers;
       list-pipe  --lists directory listings, pipelined;
       list-seq   the same listings, one at a time;
  4. peak RSS: VmHWM from /proc/<pid>/status, before stdin is closed.

The reference server (@modelcontextprotocol/server-filesystem) is called
with `read_text_file` (or `read_file`) / `list_directory` and absolute paths;
cubby with `read_file` / `list_files` (depth 1) and workspace-relative paths.
The same files and directories are asked for in the same order.

Every answer must be a JSON-RPC result that is not `isError`; read answers
must carry the file's exact content (structuredContent.content when the
server sends it; else the text, cubby's numbered lines with the numbers taken
off) and listing answers must name every entry of the directory. Any failure exits 1.

Figures per workload are the median over all timed runs (rounds x repeats);
server CPU per call is summed over the server's threads (schedstat); peak
RSS is the largest over rounds. The servers are run alternately, reference first, in one
invocation.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROTOCOL_VERSION = "2025-11-25"
WORKLOADS = ("read-seq", "read-pipe", "list-pipe", "list-seq")
TIMEOUT_S = 120.0


class BenchError(Exception):
    pass


# --------------------------------------------------------------------------
# fixture


def scan_fixture(root):
    """Files (relative path -> content) and directories (relative, '.' for
    the root -> sorted entry names) of the fixture, sorted."""
    files, dirs = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        dirs[rel] = sorted(dirnames + filenames)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8") as f:
                files[os.path.normpath(os.path.join(rel, name))] = f.read()
    if not files:
        raise BenchError(f"fixture {root} holds no files")
    return files, dirs


# --------------------------------------------------------------------------
# servers


class Server:
    """One server process with raw line I/O on its stdio."""

    def __init__(self, label, argv, stderr_path):
        self.label = label
        self.argv = argv
        self.stderr_file = open(stderr_path, "wb")
        self.stderr_path = stderr_path
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr_file,
            bufsize=0,
        )
        self.pid = self.proc.pid
        self.out_fd = self.proc.stdout.fileno()
        self.pending = b""
        self.next_id = 1

    # -- low-level I/O -----------------------------------------------------

    def send(self, data):
        self.proc.stdin.write(data)

    def read_lines(self):
        """Blocks until at least one whole line is available; returns the
        whole lines read so far (bytes, without newline)."""
        while b"\n" not in self.pending:
            chunk = os.read(self.out_fd, 1 << 20)
            if not chunk:
                raise BenchError(f"{self.label}: server closed stdout{self.stderr_tail()}")
            self.pending += chunk
        *lines, self.pending = self.pending.split(b"\n")
        return [line for line in lines if line.strip()]

    def stderr_tail(self):
        try:
            self.stderr_file.flush()
            with open(self.stderr_path, "rb") as f:
                tail = f.read()[-2000:].decode("utf-8", "replace")
            return f"\n--- server stderr (tail) ---\n{tail}" if tail else ""
        except OSError:
            return ""

    def answer_server_request(self, msg):
        """The server asked us something (e.g. roots/list): refuse politely."""
        reply = {
            "jsonrpc": "2.0",
            "id": msg["id"],
            "error": {"code": -32601, "message": "not supported by the bench client"},
        }
        self.send((json.dumps(reply) + "\n").encode())

    def classify(self, line):
        """Parses one line; returns the message if it is a response, None if
        it is a notification or a server request (answered here)."""
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise BenchError(f"{self.label}: non-JSON line on stdout: {line[:200]!r}") from e
        if "method" in msg:
            if "id" in msg:
                self.answer_server_request(msg)
            return None
        return msg

    # -- JSON-RPC ------------------------------------------------------------

    def request_line(self, method, params):
        rid = self.next_id
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        return rid, (json.dumps(msg, separators=(",", ":")) + "\n").encode()

    def call(self, method, params=None):
        rid, line = self.request_line(method, params)
        self.send(line)
        while True:
            for raw in self.read_lines():
                msg = self.classify(raw)
                if msg is None:
                    continue
                if msg.get("id") != rid:
                    raise BenchError(f"{self.label}: unexpected answer {raw[:200]!r}")
                if "error" in msg:
                    raise BenchError(f"{self.label}: {method} failed: {msg['error']}")
                return msg["result"]

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send((json.dumps(msg) + "\n").encode())

    def initialize(self):
        result = self.call(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "cubby-bench", "version": "1"},
            },
        )
        self.notify("notifications/initialized")
        return result

    # -- workloads -----------------------------------------------------------

    def run_sequential(self, calls):
        """calls: list of (params, check). One at a time. Returns
        (seconds, [(check, message)])."""
        answers = []
        lines = [self.request_line("tools/call", params) for params, _check in calls]
        start = time.perf_counter()
        for (rid, line), (_params, check) in zip(lines, calls):
            self.send(line)
            got = None
            while got is None:
                for raw in self.read_lines():
                    msg = self.classify(raw)
                    if msg is not None:
                        if got is not None or msg.get("id") != rid:
                            raise BenchError(f"{self.label}: unexpected answer {raw[:200]!r}")
                        got = msg
            answers.append((check, got))
        return time.perf_counter() - start, answers

    def run_pipelined(self, calls):
        """All requests written by one thread while this one reads the
        answers. Returns (seconds, [(check, message)]), time from the first
        byte written to the last answer read."""
        ids, blob = [], []
        for params, _check in calls:
            rid, line = self.request_line("tools/call", params)
            ids.append(rid)
            blob.append(line)
        data = b"".join(blob)
        want = set(ids)
        by_id = {}
        write_error = []

        def writer():
            try:
                self.send(data)
            except OSError as e:
                write_error.append(e)

        start = time.perf_counter()
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        while want:
            for raw in self.read_lines():
                msg = self.classify(raw)
                if msg is None:
                    continue
                rid = msg.get("id")
                if rid not in want:
                    raise BenchError(f"{self.label}: unexpected answer {raw[:200]!r}")
                want.discard(rid)
                by_id[rid] = msg
        elapsed = time.perf_counter() - start
        t.join(TIMEOUT_S)
        if write_error:
            raise BenchError(f"{self.label}: write failed: {write_error[0]}")
        return elapsed, [(check, by_id[rid]) for rid, (_p, check) in zip(ids, calls)]

    # -- process facts ---------------------------------------------------------

    def status(self):
        fields = {}
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        return fields

    def kib(self, field):
        return int(self.status()[field].split()[0])

    def cpu_seconds(self):
        """CPU time of all the server's live threads (schedstat, ns precision;
        /proc/<pid>/stat counts in 10 ms ticks, too coarse for 100 calls)."""
        total = 0
        task_dir = f"/proc/{self.pid}/task"
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # the thread ended meanwhile
        return total / 1e9

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr_file.close()


# --------------------------------------------------------------------------
# checks


def text_of(result):
    return "".join(b.get("text", "") for b in result.get("content", []) if b.get("type") == "text")


def unnumbered(text):
    """The content of `read_file`'s text (`cat -n` style lines), without a
    final newline."""
    lines = []
    for line in text.split("\n"):
        number, tab, rest = line.partition("\t")
        if tab and number.strip().isdigit():
            lines.append(rest)
    return "\n".join(lines)


def check_answer(label, check, msg):
    if "error" in msg:
        raise BenchError(f"{label}: JSON-RPC error {msg['error']}")
    result = msg.get("result")
    if not isinstance(result, dict):
        raise BenchError(f"{label}: answer without result: {json.dumps(msg)[:300]}")
    if result.get("isError"):
        raise BenchError(f"{label}: error result: {text_of(result)[:300]}")
    kind, expected = check
    if kind == "read":
        if "structuredContent" in result:
            got = (result.get("structuredContent") or {}).get("content")
        else:
            got = unnumbered(text_of(result))
            expected = expected.rstrip("\n")
        if got != expected:
            raise BenchError(f"{label}: read returned {got!r:.80}, expected {expected!r:.80}")
    elif kind == "list":
        text = text_of(result)
        missing = [name for name in expected if name not in text]
        if missing:
            raise BenchError(f"{label}: listing misses {missing[:5]}: {text[:300]!r}")


# --------------------------------------------------------------------------
# per-server calls


def reference_calls(root, tools, files, dirs, reads, lists):
    read_tool = "read_text_file" if "read_text_file" in tools else "read_file"
    if read_tool not in tools or "list_directory" not in tools:
        raise BenchError(f"reference: expected read_text_file/list_directory in {sorted(tools)}")
    file_list, dir_list = sorted(files), sorted(dirs)
    read = [
        (
            {"name": read_tool, "arguments": {"path": os.path.join(root, p)}},
            ("read", files[p]),
        )
        for p in (file_list[i % len(file_list)] for i in range(reads))
    ]
    lst = [
        (
            {"name": "list_directory", "arguments": {"path": os.path.normpath(os.path.join(root, d))}},
            ("list", dirs[d]),
        )
        for d in (dir_list[i % len(dir_list)] for i in range(lists))
    ]
    return read, lst


def cubby_calls(_root, tools, files, dirs, reads, lists):
    if "read_file" not in tools or "list_files" not in tools:
        raise BenchError(f"cubby: expected read_file/list_files in {sorted(tools)}")
    file_list, dir_list = sorted(files), sorted(dirs)
    read = [
        ({"name": "read_file", "arguments": {"path": p}}, ("read", files[p]))
        for p in (file_list[i % len(file_list)] for i in range(reads))
    ]
    lst = [
        (
            {"name": "list_files", "arguments": {"path": d, "depth": 1}},
            ("list", dirs[d]),
        )
        for d in (dir_list[i % len(dir_list)] for i in range(lists))
    ]
    return read, lst


SERVERS = {"reference": reference_calls, "cubby": cubby_calls, "baseline": cubby_calls}


def run_once(label, argv, root, files, dirs, args, tmpdir, round_no):
    stderr_path = os.path.join(tmpdir, f"{label}-{round_no}.stderr")
    server = Server(label, argv, stderr_path)
    try:
        server.initialize()
        tools = {t["name"] for t in server.call("tools/list")["tools"]}
        reads, lists = SERVERS[label](root, tools, files, dirs, args.reads, args.lists)
        facts = {
            "process": server.status()["Name"],
            "exe": os.path.realpath(f"/proc/{server.pid}/exe"),
            "rss_after_init_kib": server.kib("VmRSS"),
        }
        if args.warmup:
            warm_reads = [reads[i % len(reads)] for i in range(args.warmup)]
            warm_lists = [lists[i % len(lists)] for i in range(max(1, args.warmup // 10))]
            for _check_label, batch in (("warmup reads", warm_reads), ("warmup lists", warm_lists)):
                _t, answers = server.run_pipelined(batch)
                for check, msg in answers:
                    check_answer(f"{label} {_check_label}", check, msg)
        timings = {}
        cpu = {}
        plan = {
            "read-seq": (server.run_sequential, reads),
            "read-pipe": (server.run_pipelined, reads),
            "list-pipe": (server.run_pipelined, lists),
            "list-seq": (server.run_sequential, lists),
        }
        for name in WORKLOADS:
            run, calls = plan[name]
            timings[name], cpu[name] = [], []
            for _ in range(args.repeat):
                cpu0 = server.cpu_seconds()
                seconds, answers = run(calls)
                cpu[name].append(server.cpu_seconds() - cpu0)
                for check, msg in answers:
                    check_answer(f"{label} {name}", check, msg)
                timings[name].append(seconds)
        facts["peak_rss_kib"] = server.kib("VmHWM")
        facts["rss_end_kib"] = server.kib("VmRSS")
        facts["threads"] = int(server.status()["Threads"])
        return {
            "calls": {"read-seq": len(reads), "read-pipe": len(reads),
                      "list-pipe": len(lists), "list-seq": len(lists)},
            "seconds": timings,
            "cpu_seconds": cpu,
            **facts,
        }
    except BenchError as e:
        raise BenchError(f"{e}{server.stderr_tail()}") from None
    finally:
        server.close()


# --------------------------------------------------------------------------
# report


def summarize(runs):
    """runs: list of per-round dicts for one server -> summary."""
    out = {"workloads": {}}
    for w in WORKLOADS:
        rates = [r["calls"][w] / t for r in runs for t in r["seconds"][w]]
        cpu_us = [c / r["calls"][w] * 1e6 for r in runs for c in r["cpu_seconds"][w]]
        out["workloads"][w] = {
            "calls": runs[0]["calls"][w],
            "calls_per_s_median": statistics.median(rates),
            "calls_per_s_all": rates,
            "server_cpu_us_per_call_median": statistics.median(cpu_us),
        }
    out["peak_rss_mib"] = max(r["peak_rss_kib"] for r in runs) / 1024
    out["rss_after_init_mib"] = max(r["rss_after_init_kib"] for r in runs) / 1024
    out["process"] = runs[0]["process"]
    out["exe"] = runs[0]["exe"]
    out["threads"] = runs[0]["threads"]
    return out


def print_table(summary, argv_by_label, args, files, dirs):
    ref, cub = summary["reference"], summary["cubby"]
    print()
    print(f"fixture: {len(files)} files ({sum(len(v.encode()) for v in files.values()) // len(files)} B avg), "
          f"{len(dirs)} directories; {args.rounds} round(s) x {args.repeat} timed run(s) per workload, "
          f"{args.warmup} warmup reads; calls/s = median over all timed runs, "
          f"peak RSS = max VmHWM over rounds")
    for label in ("reference", "cubby"):
        s = summary[label]
        print(f"{label}: pid process `{s['process']}` ({s['exe']}), {s['threads']} threads, "
              f"RSS after initialize {s['rss_after_init_mib']:.1f} MiB: {shlex.join(argv_by_label[label])}")
    print()
    print("| workload | server | calls | calls/s | server CPU µs/call | peak RSS MiB | cubby/reference calls/s | cubby/reference RSS |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for w in WORKLOADS:
        for label in ("reference", "cubby"):
            s = summary[label]
            ws = s["workloads"][w]
            if label == "cubby":
                ratio = ws["calls_per_s_median"] / ref["workloads"][w]["calls_per_s_median"]
                rss_ratio = cub["peak_rss_mib"] / ref["peak_rss_mib"]
                extra = f"{ratio:.2f}× | {rss_ratio:.3f} (1/{1 / rss_ratio:.1f})"
            else:
                extra = " | "
            print(f"| {w} | {label} | {ws['calls']} | {ws['calls_per_s_median']:,.0f} | "
                  f"{ws['server_cpu_us_per_call_median']:.0f} | {s['peak_rss_mib']:.1f} | {extra} |")
    print()
    for w in WORKLOADS:
        spread = ", ".join(
            f"{label} " + "/".join(f"{r:,.0f}" for r in summary[label]["workloads"][w]["calls_per_s_all"])
            for label in ("reference", "cubby")
        )
        print(f"  {w} all runs: {spread}")
    targets = []
    for w in WORKLOADS:
        ratio = cub["workloads"][w]["calls_per_s_median"] / ref["workloads"][w]["calls_per_s_median"]
        targets.append((f"{w} throughput ≥ 3×", ratio >= 3.0, f"{ratio:.2f}×"))
    rss_ratio = cub["peak_rss_mib"] / ref["peak_rss_mib"]
    targets.append(("peak RSS ≤ 1/3", rss_ratio <= 1 / 3, f"{rss_ratio:.3f}"))
    print()
    for name, ok, value in targets:
        print(f"  target {name}: {'met' if ok else 'NOT met'} ({value})")
    return all(ok for _n, ok, _v in targets)


def print_baseline(summary, argv_by_label):
    """cubby against an earlier build of itself (--baseline), same workload, same run."""
    base, cub = summary["baseline"], summary["cubby"]
    print()
    print(f"baseline: {shlex.join(argv_by_label['baseline'])}")
    print("| workload | baseline calls/s | cubby calls/s | cubby/baseline | baseline CPU µs/call | cubby CPU µs/call |")
    print("|---|---:|---:|---:|---:|---:|")
    for w in WORKLOADS:
        b, c = base["workloads"][w], cub["workloads"][w]
        print(f"| {w} | {b['calls_per_s_median']:,.0f} | {c['calls_per_s_median']:,.0f} | "
              f"{c['calls_per_s_median'] / b['calls_per_s_median']:.2f}× | "
              f"{b['server_cpu_us_per_call_median']:.0f} | {c['server_cpu_us_per_call_median']:.0f} |")
    print(f"| peak RSS MiB | {base['peak_rss_mib']:.1f} | {cub['peak_rss_mib']:.1f} | "
          f"{cub['peak_rss_mib'] / base['peak_rss_mib']:.2f} | | |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixture", required=True, help="directory both servers serve")
    ap.add_argument("--reference", required=True, help="reference server command (shlex-split)")
    ap.add_argument("--cubby", required=True, help="cubby server command (shlex-split)")
    ap.add_argument("--baseline", help="another cubby build's server command (shlex-split), run alternately "
                    "with the others and compared with --cubby (e.g. main before a restructure)")
    ap.add_argument("--reads", type=int, default=1000)
    ap.add_argument("--lists", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3, help="fresh server processes per server")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each workload per round")
    ap.add_argument("--warmup", type=int, default=200, help="untimed pipelined reads first (lists: a tenth)")
    ap.add_argument("--json", help="write the raw figures here")
    ap.add_argument("--enforce-targets", action="store_true",
                    help="exit 2 when a target (3× throughput, 1/3 RSS) is not met")
    args = ap.parse_args()

    root = os.path.realpath(args.fixture)
    files, dirs = scan_fixture(root)
    argv_by_label = {"reference": shlex.split(args.reference), "cubby": shlex.split(args.cubby)}
    if args.baseline:
        argv_by_label["baseline"] = shlex.split(args.baseline)
    runs = {label: [] for label in argv_by_label}
    with tempfile.TemporaryDirectory(prefix="cubby-mcp-bench-") as tmpdir:
        for round_no in range(args.rounds):
            for label in argv_by_label:
                r = run_once(label, argv_by_label[label], root, files, dirs, args, tmpdir, round_no)
                runs[label].append(r)
                rates = ", ".join(
                    f"{w} {r['calls'][w] / statistics.median(r['seconds'][w]):,.0f}/s" for w in WORKLOADS
                )
                print(f"round {round_no + 1} {label}: {rates}; peak RSS {r['peak_rss_kib'] / 1024:.1f} MiB",
                      file=sys.stderr, flush=True)
    summary = {label: summarize(runs[label]) for label in runs}
    ok = print_table(summary, argv_by_label, args, files, dirs)
    if "baseline" in summary:
        print_baseline(summary, argv_by_label)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "summary": summary, "runs": runs}, f, indent=1)
        print(f"\nraw figures: {args.json}")
    if args.enforce_targets and not ok:
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"mcp_client.py: {e}", file=sys.stderr)
        sys.exit(1)
