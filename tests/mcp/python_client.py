"""Black-box test of cubby's MCP server with the official Python SDK client.

Usage: python_client.py CUBBY_BIN WORKSPACE (stdio|URL) (legacy|auto) [CONFIG]

Drives every tool family over one connection: listing (schemas, output
schemas, annotations), reads, read-before-write, edits, errors, a binary
file, search, a streamed command with progress, and a cancelled long
command whose whole process tree must die. Exits non-zero on the first
failure, printing what went wrong.

Without CONFIG the server runs with its defaults: results carry cubby's
text only (no structuredContent) and tools no outputSchema. With CONFIG (a
cubby.toml with `[mcp] structured_content = true`; over HTTP the server was
started with it) both are there, and the SDK validates each result's
structuredContent against its tool's outputSchema.
"""

import json
import os
import sys
import time

import anyio
from mcp import Client, StdioServerParameters


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def text_of(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def alive_with(marker):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd}")
    return found


async def main():
    cubby, workspace, where, mode = sys.argv[1:5]
    config = sys.argv[5] if len(sys.argv) > 5 else None
    structured = config is not None
    if where == "stdio":
        args = ["mcp", "--root", workspace, "--provider", "local"]
        if config:
            args += ["--config", config]
        server = StdioServerParameters(command=cubby, args=args)
    else:
        server = where
    async with Client(server, mode=mode, raise_exceptions=True) as client:
        info = client.server_info
        check(info is not None and info.name == "cubby", f"server info {info}")
        check("workspace" in (client.instructions or ""), "instructions")

        tools = (await client.list_tools()).tools
        names = [t.name for t in tools]
        for expected in ["read_file", "write_file", "edit_file", "glob", "list_files",
                         "search", "changes", "run", "start_process", "process_logs",
                         "stop_process", "list_processes", "write_stdin", "preview"]:
            check(expected in names, f"{expected} missing from {names}")
        for t in tools:
            check(t.input_schema.get("type") == "object", f"{t.name} input schema")
            check(t.input_schema.get("additionalProperties") is False, f"{t.name} closed schema")
            if structured:
                check(t.output_schema and t.output_schema.get("type") == "object", f"{t.name} output schema")
            else:
                check(t.output_schema is None, f"{t.name} has an output schema: {t.output_schema}")
            check(t.annotations is not None, f"{t.name} annotations")
        by_name = {t.name: t for t in tools}
        check(by_name["read_file"].annotations.read_only_hint is True, "read_file read-only")
        check(by_name["write_file"].annotations.destructive_hint is True, "write_file destructive")

        def facts(r, key, value):
            """A fact of a successful result: from structuredContent when it is
            sent (and then it must be the only place the SDK could have
            validated), else there must be none."""
            check(not r.is_error, text_of(r))
            if structured:
                check(r.structured_content[key] == value, f"{key}: {r.structured_content}")
            else:
                check(r.structured_content is None, f"structuredContent sent: {r.structured_content}")

        # Read-before-write, edit with a diff, structured content.
        r = await client.call_tool("write_file", {"path": "notes/a.txt", "content": "one\ntwo\n"})
        facts(r, "created", True)
        check(text_of(r).startswith("Created `notes/a.txt`"), text_of(r))
        r = await client.call_tool("write_file", {"path": "seed.txt", "content": "x"})
        check(r.is_error and text_of(r).startswith("ERROR not_read:"), text_of(r))
        check(r.structured_content is None, f"error with structuredContent: {r}")
        r = await client.call_tool("read_file", {"path": "seed.txt"})
        facts(r, "total_lines", 1)
        check(text_of(r) == "     1\tseed\n", repr(text_of(r)))
        r = await client.call_tool("edit_file", {"path": "seed.txt", "find": "seed", "replace": "grown"})
        check(not r.is_error and "+grown" in text_of(r), text_of(r))

        # Errors are results, with the contract's kinds.
        r = await client.call_tool("read_file", {"path": "../../etc/passwd"})
        check(r.is_error and text_of(r).startswith("ERROR path_escape:"), text_of(r))
        r = await client.call_tool("read_file", {"path": 42})
        check(r.is_error and text_of(r).startswith("ERROR invalid_input:"), text_of(r))
        r = await client.call_tool("web_fetch", {"url": "http://example.com"})
        check(r.is_error and text_of(r).startswith("ERROR denied:"), text_of(r))
        r = await client.call_tool("read_file", {"path": "nope.txt"})
        check(r.is_error and text_of(r).startswith("ERROR not_found:"), text_of(r))

        # A binary file: metadata, not an error.
        r = await client.call_tool("read_file", {"path": "image.png"})
        facts(r, "binary", True)
        facts(r, "media_type", "image/png")
        check("image/png" in text_of(r), text_of(r))

        r = await client.call_tool("search", {"query": "grown"})
        facts(r, "total", 1)
        check("seed.txt:1: grown" in text_of(r), text_of(r))
        r = await client.call_tool("glob", {"pattern": "**/*.txt"})
        facts(r, "entries", ["notes/a.txt", "seed.txt"])
        check(text_of(r).splitlines()[:2] == ["notes/a.txt", "seed.txt"], text_of(r))

        # A command whose output streams as progress.
        progress = []

        async def on_progress(p, total, message):
            progress.append(message or "")

        r = await client.call_tool(
            "run", {"command": "echo first; sleep 0.3; echo second"}, progress_callback=on_progress
        )
        check(not r.is_error and text_of(r).startswith("OK exit=0"), text_of(r))
        check("".join(progress) == "first\nsecond\n", f"progress {progress!r}")
        r = await client.call_tool("run", {"command": "exit 4"})
        check(not r.is_error and text_of(r).startswith("FAILED exit=4"), text_of(r))

        # A background server-like process.
        r = await client.call_tool("start_process", {"name": "ticker", "command": "while true; do echo tick; sleep 0.1; done"})
        check(not r.is_error, text_of(r))
        await anyio.sleep(0.4)
        r = await client.call_tool("process_logs", {"name": "ticker"})
        check("tick" in text_of(r), text_of(r))
        if structured:
            check("tick" in r.structured_content["output"], text_of(r))
        else:
            check(r.structured_content is None, f"structuredContent sent: {r}")
        r = await client.call_tool("stop_process", {"name": "ticker"})
        check(not r.is_error, text_of(r))

        # A cancelled long command: its whole tree dies.
        marker = f"cubby-mcp-cancel-{os.getpid()}-{int(time.time() * 1000)}"
        script = os.path.join(workspace, f"{marker}.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nsleep 1000\n")
        os.chmod(script, 0o755)
        with anyio.move_on_after(1.0):
            await client.call_tool("run", {"command": f"setsid sh -c './{marker}.sh &' & ./{marker}.sh"})
            raise AssertionError("the long command was not cancelled")
        deadline = time.time() + 10
        while alive_with(marker) and time.time() < deadline:
            await anyio.sleep(0.05)
        check(not alive_with(marker), f"survivors: {alive_with(marker)}")

        # Still serving after all that.
        r = await client.call_tool("list_processes", {})
        check(not r.is_error, text_of(r))
    print(f"ok: {where} {mode}{' structured' if structured else ''}")


if __name__ == "__main__":
    anyio.run(main)
