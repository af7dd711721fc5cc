"""A scripted MCP server over stdio (newline-delimited JSON-RPC) for the
upstream tests: well-behaved and misbehaving tools, standard library only.

Usage: upstream_server.py [hang-init | modern] [log] [endless] [dir=<path>]
`modern` speaks only the 2026-07-28 revision (`server/discover`, no
`initialize`); otherwise it speaks only the handshake (`initialize`). With
`log`, each request's method and the protocol version its `_meta` names
are appended to `methods.log` in the workspace.
It reads `desc.txt` in the workspace for the description of `echo`, and
adds a property to `echo`'s schema when `schema.txt` is there, so a test
can change a definition between runs.

cubby starts it in `/`; it goes to the workspace by the path cubby gives
(`CUBBY_WORKSPACE`), as a server that works on the workspace would, or
to the directory an argument `dir=<path>` names.
Its `cat` reads any path it is given, and its `git` runs `git status` in
any repository, as servers that act on files and repositories do.
It also speaks as `python3 -m upstream_server` (with this directory on
`PYTHONPATH`).
"""

import base64
import json
import os
import struct
import sys
import threading
import time
import zlib

os.chdir(os.environ.get("CUBBY_WORKSPACE", "."))
# `dir=<path>` among the arguments: there instead.
for arg in sys.argv[1:]:
    if arg.startswith("dir="):
        os.chdir(arg[len("dir="):])

OUT = threading.Lock()
CANCELLED = {}
# Set by the `grow` tool: the listing then has a new tool and a changed
# `echo`, and the server says so with notifications/tools/list_changed.
GROWN = threading.Event()
# Set by the `deaf` tool: the server reads nothing more.
DEAF = threading.Event()


def send(msg):
    data = json.dumps(msg) + "\n"
    with OUT:
        sys.stdout.write(data)
        sys.stdout.flush()


def png(width, height, noise=False):
    if noise:
        # Random pixels: the PNG is about as large as its raw pixels.
        raw = b"".join(b"\x00" + os.urandom(width * 3) for _ in range(height))
    else:
        row = b"\x00" + bytes((x * 7) % 256 for x in range(width * 3))
        raw = row * height

    def chunk(kind, body):
        c = struct.pack(">I", len(body)) + kind + body
        return c + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b"")


def schema(props=None):
    return {"type": "object", "properties": props or {}}


def tools():
    try:
        with open("desc.txt") as f:
            desc = f.read().strip()
    except OSError:
        desc = "Echoes its text."
    echo_props = {"text": {"type": "string"}}
    # `schema.txt` in the workspace: a new property of `echo`'s schema.
    if os.path.exists("schema.txt"):
        echo_props["mode"] = {"type": "string"}
    # `bigschema.txt`: a property of `echo` described by its content.
    if os.path.exists("bigschema.txt"):
        with open("bigschema.txt") as f:
            echo_props["huge"] = {"type": "string", "description": f.read()}
    grown = []
    if GROWN.is_set():
        desc += " Grown."
        grown = [{"name": "fresh", "description": "Appeared later.", "inputSchema": schema()}]
    return grown + [
        {"name": "echo", "description": desc, "inputSchema": schema(echo_props)},
        {"name": "a__b", "description": "A name with the separator in it.", "inputSchema": schema()},
        {"name": "unlisted", "description": "Not in the allow-list.", "inputSchema": schema()},
        {"name": "big", "description": "Returns n bytes of text.", "inputSchema": schema({"n": {"type": "integer"}})},
        {"name": "image", "description": "Returns a PNG.", "inputSchema": schema({"w": {"type": "integer"}, "h": {"type": "integer"}})},
        {"name": "svg", "description": "Returns an SVG image.", "inputSchema": schema()},
        {"name": "link", "description": "Returns a resource link.", "inputSchema": schema()},
        {"name": "sleep", "description": "Sleeps; notes a cancellation.", "inputSchema": schema({"marker": {"type": "string"}})},
        {"name": "flood", "description": "Floods progress.", "inputSchema": schema({"n": {"type": "integer"}})},
        {"name": "env", "description": "Lists its environment.", "inputSchema": schema()},
        {"name": "daemon", "description": "Leaves a daemon.", "inputSchema": schema({"beat": {"type": "string"}})},
        {"name": "die", "description": "Exits.", "inputSchema": schema()},
        {"name": "grow", "description": "Adds a tool and changes echo.", "inputSchema": schema()},
        {"name": "relist", "description": "Says its tools changed, n times.", "inputSchema": schema({"n": {"type": "integer"}})},
        {"name": "fail", "description": "Answers an error of n bytes.", "inputSchema": schema({"n": {"type": "integer"}})},
        {"name": "deaf", "description": "Stops reading its input.", "inputSchema": schema()},
        {"name": "cat", "description": "Reads a file by its path.", "inputSchema": schema({"path": {"type": "string"}})},
        {"name": "git", "description": "Runs git status in a repository.", "inputSchema": schema({"repo": {"type": "string"}})},
    ]


def text(t):
    return {"content": [{"type": "text", "text": t}]}


def call(mid, params, meta):
    name = params.get("name")
    args = params.get("arguments") or {}
    token = (params.get("_meta") or {}).get("progressToken")
    if name == "echo":
        return text("echo: " + str(args.get("text", "")))
    if name == "a__b":
        return text("routed to a__b")
    if name == "cat":
        try:
            with open(args["path"]) as f:
                return text(f.read())
        except OSError as e:
            return text("cat failed: " + type(e).__name__)
    if name == "git":
        import subprocess
        done = subprocess.run(["git", "-C", args["repo"], "status", "--short"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        return text("git exited %d" % done.returncode)
    if name == "unlisted":
        return text("UNLISTED RAN")
    if name == "big":
        return text("x" * int(args.get("n", 0)))
    if name == "image":
        data = png(int(args.get("w", 10)), int(args.get("h", 10)), bool(args.get("noise")))
        return {"content": [{"type": "image", "data": base64.b64encode(data).decode(), "mimeType": "image/png"}]}
    if name == "svg":
        svg = b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>'
        return {"content": [{"type": "image", "data": base64.b64encode(svg).decode(), "mimeType": "image/svg+xml"}]}
    if name == "link":
        return {"content": [{"type": "resource_link", "uri": "file:///etc/passwd", "name": "passwd", "mimeType": "text/plain"}]}
    if name == "sleep":
        for _ in range(3000):
            if CANCELLED.get(mid):
                # Written whole, then named: a reader never sees it empty.
                with open(args["marker"] + ".part", "w") as f:
                    f.write(repr(time.time()))
                os.replace(args["marker"] + ".part", args["marker"])
                return None
            time.sleep(0.005)
        return text("slept")
    if name == "flood":
        for i in range(int(args.get("n", 1000))):
            if token is not None:
                send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": token, "progress": i, "message": args.get("message", "p" * 100)}})
        return text("flooded")
    if name == "env":
        return text("\n".join(sorted(os.environ)))
    if name == "daemon":
        beat = args["beat"]
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                while True:
                    with open(beat, "a") as f:
                        f.write(".")
                    time.sleep(0.02)
            os._exit(0)
        return text("daemon started")
    if name == "die":
        os._exit(3)
    if name == "grow":
        GROWN.set()
        send({"jsonrpc": "2.0", "id": mid, "result": text("grown")})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return None
    if name == "fresh":
        return text("FRESH RAN")
    if name == "deaf":
        DEAF.set()
        return text("deaf now")
    if name == "relist":
        for _ in range(int(args.get("n", 1))):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return text("relisted")
    if name == "fail":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32000, "message": "e" * int(args.get("n", 1))}})
        return None
    return None


MODERN = "modern" in sys.argv[1:]
ENDLESS = "endless" in sys.argv[1:]
LOG = "log" in sys.argv[1:]


def log_method(msg):
    meta = (msg.get("params") or {}).get("_meta") or {}
    version = meta.get("io.modelcontextprotocol/protocolVersion", "-")
    with open("methods.log", "a") as f:
        f.write("%s %s\n" % (msg.get("method"), version))


def handle(msg):
    mid = msg.get("id")
    method = msg.get("method")
    if LOG and method is not None:
        log_method(msg)
    if MODERN and method == "server/discover":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": True}},
            "ttlMs": 0, "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted", "version": "1"}}}})
    elif MODERN and method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "unknown"}})
    elif method == "initialize":
        if len(sys.argv) > 1 and sys.argv[1] == "hang-init":
            return
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "scripted", "version": "1"}}})
    elif method == "tools/list":
        # Each listing (a page) is noted in `lists.log`; `endless` gives a
        # next page every time.
        # (A server not given the workspace has nowhere to note them.)
        try:
            with open("lists.log", "a") as f:
                f.write(".")
        except OSError:
            pass
        result = {"tools": tools()}
        if ENDLESS:
            cursor = (msg.get("params") or {}).get("cursor") or "0"
            result["nextCursor"] = str(int(cursor) + 1)
        send({"jsonrpc": "2.0", "id": mid, "result": result})
    elif method == "tools/call":
        def run():
            result = call(mid, msg.get("params") or {}, None)
            if result is not None:
                send({"jsonrpc": "2.0", "id": mid, "result": result})
        threading.Thread(target=run, daemon=True).start()
    elif method == "notifications/cancelled":
        CANCELLED[(msg.get("params") or {}).get("requestId")] = True
    elif mid is not None and method is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "unknown"}})


for line in sys.stdin:
    if DEAF.is_set():
        threading.Event().wait()
    line = line.strip()
    if line:
        handle(json.loads(line))
