"""Black-box test of cubby's MCP tools from the OpenAI Agents SDK (no model, no network).

Usage: agents_sdk_client.py CUBBY_BIN WORKSPACE CONFIG

1. ``agents.mcp.MCPServerStdio``: ``connect()``, ``list_tools()``,
   ``call_tool(...)``, ``cleanup()``.
2. Every tool's input schema through the SDK's strict conversion
   (``ensure_strict_json_schema``, then ``MCPUtil.get_function_tools`` with
   ``convert_schemas_to_strict=True``, which silently falls back to a non-strict
   tool when conversion fails, so each tool must come back strict) and the
   Responses API tool payload (``Converter.convert_tools``).
3. The strict function tools invoked as the runner does (``on_invoke_tool``
   with a model's JSON arguments, optional arguments sent as null), with
   text results, and with ``use_structured_content`` on a second server
   started with CONFIG (``[mcp] structured_content = true``); the first runs
   with cubby's defaults: text results only, no outputSchema.
4. ``Runner.run`` with a scripted ``Model`` that calls the tools, so the SDK
   lists the tools, executes the calls and feeds the outputs back.

Exits non-zero on the first failure, printing what went wrong.
"""

import asyncio
import copy
import json
import sys

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio, MCPUtil
from agents.models.interface import Model
from agents.models.openai_responses import Converter
from agents.run_context import RunContextWrapper
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

EXPECTED = [
    "read_file", "write_file", "edit_file", "glob", "list_files", "search", "changes",
    "view_file", "run", "start_process", "process_logs", "stop_process",
    "list_processes", "write_stdin", "preview",
]


def check(cond, what):
    if not cond:
        raise AssertionError(what() if callable(what) else what)


def text_of(result):
    """The text of an MCP CallToolResult."""
    return "".join(getattr(c, "text", "") for c in result.content)


def strict_ok(schema, where):
    """Checks the rules of OpenAI strict mode on a converted schema."""
    if isinstance(schema, list):
        for s in schema:
            strict_ok(s, where)
        return
    if not isinstance(schema, dict):
        return
    types = schema.get("type")
    if types == "object" or (isinstance(types, list) and "object" in types):
        props = schema.get("properties", {})
        check(schema.get("additionalProperties") is False, f"{where}: additionalProperties")
        check(sorted(schema.get("required", [])) == sorted(props),
              f"{where}: every property required {schema}")
    for key, value in schema.items():
        if key == "properties":
            for name, sub in value.items():
                strict_ok(sub, f"{where}.{name}")
        elif isinstance(value, (dict, list)):
            strict_ok(value, f"{where}.{key}")


class ScriptedModel(Model):
    """Answers with one tool call per turn from ``calls``, then with text."""

    def __init__(self, calls):
        self.calls = calls
        self.turn = 0
        self.inputs = []
        self.tools = []

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, **kwargs):
        self.inputs.append(copy.deepcopy(input))
        self.tools.append(list(tools))
        turn = self.turn
        self.turn += 1
        if turn < len(self.calls):
            name, args = self.calls[turn]
            item = ResponseFunctionToolCall(
                type="function_call", id=f"fc_{turn}", call_id=f"call_{turn}",
                name=name, arguments=json.dumps(args), status="completed",
            )
        else:
            item = ResponseOutputMessage(
                type="message", id="msg_done", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("not streamed")


async def main():
    cubby, workspace, config = sys.argv[1:4]
    set_tracing_disabled(True)
    server = MCPServerStdio(
        params={"command": cubby, "args": ["mcp", "--root", workspace, "--provider", "local"]},
        name="cubby",
        cache_tools_list=True,
        client_session_timeout_seconds=60,
    )
    await server.connect()
    try:
        # With mcp 2.x the session opens with `server/discover` (2026-07-28),
        # and then `server.server_initialize_result` stays None: read the
        # server's identity from the session.
        session = server.session
        info = session.server_info
        check(info is not None and info.name == "cubby", lambda: f"server info {info}")
        protocol = session.protocol_version
        check(protocol == "2026-07-28", f"protocol {protocol}")

        # 1. The server API.
        tools = await server.list_tools()
        names = [t.name for t in tools]
        for name in EXPECTED:
            check(name in names, f"{name} missing from {names}")
        for t in tools:
            check(t.input_schema.get("type") == "object", f"{t.name} input schema")
            check(t.output_schema is None, f"{t.name} has an output schema")

        r = await server.call_tool("write_file", {"path": "agents/notes.txt", "content": "one\ntwo\n"})
        check(not r.is_error and text_of(r).startswith("Created `agents/notes.txt`"),
              lambda: f"write_file {r}")
        check(r.structured_content is None, lambda: f"write_file structured {r}")
        r = await server.call_tool("read_file", {"path": "agents/notes.txt"})
        check(not r.is_error and text_of(r) == "     1\tone\n     2\ttwo\n", lambda: f"read_file {r}")
        check(r.structured_content is None, lambda: f"read_file structured {r}")
        r = await server.call_tool("list_files", {})
        check(not r.is_error and "agents/notes.txt" in text_of(r).splitlines(),
              lambda: f"list_files {r}")
        r = await server.call_tool("read_file", {"path": "missing.txt"})
        check(r.is_error and text_of(r).startswith("ERROR "), lambda: f"missing read_file {r}")

        # 2. Strict conversion of every input schema.
        for t in tools:
            try:
                strict = ensure_strict_json_schema(copy.deepcopy(t.input_schema))
            except Exception as e:  # noqa: BLE001 - report which tool failed
                raise AssertionError(f"{t.name}: strict conversion failed: {e!r}") from e
            strict_ok(strict, t.name)

        agent = Agent(name="cubby-agent", instructions="Use the tools.", mcp_servers=[server])
        ctx = RunContextWrapper(context=None)
        function_tools = await MCPUtil.get_function_tools(
            server, convert_schemas_to_strict=True, run_context=ctx, agent=agent
        )
        check(sorted(f.name for f in function_tools) == sorted(names),
              lambda: f"function tools {[f.name for f in function_tools]}")
        for f in function_tools:
            check(f.strict_json_schema is True,
                  lambda f=f: f"{f.name} fell back to a non-strict schema: {f.params_json_schema}")
            strict_ok(f.params_json_schema, f.name)
        converted = Converter.convert_tools(function_tools, [])
        payload = [t for t in converted.tools if t.get("type") == "function"]
        check(len(payload) == len(function_tools), lambda: f"converted tools {converted.tools}")
        for p in payload:
            check(p["strict"] is True, lambda p=p: f"{p['name']} not strict in the request: {p}")
            strict_ok(p["parameters"], p["name"])

        # 3. The function tools as the runner invokes them: a strict model
        #    sends every property, null for the ones it leaves out.
        by_name = {f.name: f for f in function_tools}

        async def invoke(name, args, call_id):
            tool_ctx = ToolContext(context=None, tool_name=name, tool_call_id=call_id,
                                   tool_arguments=json.dumps(args))
            return await by_name[name].on_invoke_tool(tool_ctx, json.dumps(args))

        def out_text(out):
            """The text of a tool output: a string, a text item or a list of them."""
            if isinstance(out, str):
                return out
            if isinstance(out, list):
                return "".join(out_text(o) for o in out)
            if isinstance(out, dict):
                return out.get("text", "") or ""
            return getattr(out, "text", "") or ""

        out = await invoke("write_file", {"path": "agents/strict.txt", "content": "strict\n"}, "f1")
        check(out_text(out).startswith("Created `agents/strict.txt`"), lambda: f"strict write_file {out!r}")
        out = await invoke("read_file", {"path": "agents/strict.txt", "offset": None, "limit": None}, "f2")
        check(out_text(out) == "     1\tstrict\n", lambda: f"strict read_file {out!r}")
        out = await invoke("list_files", {"path": None, "glob": None, "depth": None}, "f3")
        check("agents/strict.txt" in out_text(out), lambda: f"strict list_files {out!r}")
        out = await invoke("read_file", {"path": "missing.txt", "offset": None, "limit": None}, "f4")
        check(out_text(out).startswith("ERROR "), lambda: f"strict missing read_file {out!r}")
        # With use_structured_content set but no structuredContent sent,
        # the model still gets the text.
        server.use_structured_content = True
        try:
            out = await invoke(
                "read_file", {"path": "agents/strict.txt", "offset": None, "limit": None}, "f5"
            )
            check(out_text(out) == "     1\tstrict\n", lambda: f"text-only read_file {out!r}")
        finally:
            server.use_structured_content = False

        # A second server with structured content on: output schemas are
        # listed, and with use_structured_content the model gets the
        # structuredContent as JSON, an error result still as its text.
        typed = MCPServerStdio(
            params={"command": cubby,
                    "args": ["mcp", "--root", workspace, "--provider", "local", "--config", config]},
            name="cubby-structured",
            cache_tools_list=True,
            client_session_timeout_seconds=60,
            use_structured_content=True,
        )
        await typed.connect()
        try:
            typed_tools = await typed.list_tools()
            for t in typed_tools:
                check((t.output_schema or {}).get("type") == "object", f"{t.name} output schema")
            r = await typed.call_tool("read_file", {"path": "agents/strict.txt"})
            check(not r.is_error and r.structured_content["total_lines"] == 1, lambda: f"typed {r}")
            check(text_of(r) == "     1\tstrict\n", lambda: f"typed read_file text {r}")
            typed_agent = Agent(name="cubby-typed", instructions="Use the tools.", mcp_servers=[typed])
            typed_by_name = {
                f.name: f
                for f in await MCPUtil.get_function_tools(
                    typed, convert_schemas_to_strict=True, run_context=ctx, agent=typed_agent
                )
            }

            async def invoke_typed(name, args, call_id):
                tool_ctx = ToolContext(context=None, tool_name=name, tool_call_id=call_id,
                                       tool_arguments=json.dumps(args))
                return await typed_by_name[name].on_invoke_tool(tool_ctx, json.dumps(args))

            out = await invoke_typed(
                "read_file", {"path": "agents/strict.txt", "offset": None, "limit": None}, "f6"
            )
            data = json.loads(out_text(out))
            check(data["content"] == "strict\n" and data["total_lines"] == 1,
                  lambda: f"structured read_file {out!r}")
            out = await invoke_typed("list_files", {"path": None, "glob": None, "depth": None}, "f7")
            check("agents/strict.txt" in json.loads(out_text(out))["entries"],
                  lambda: f"structured list_files {out!r}")
            out = await invoke_typed(
                "read_file", {"path": "missing.txt", "offset": None, "limit": None}, "f8"
            )
            check(out_text(out).startswith("ERROR "), lambda: f"structured missing read_file {out!r}")
        finally:
            await typed.cleanup()

        # 4. An agent run with a scripted model.
        calls = [
            ("write_file", {"path": "agents/run.txt", "content": "run\n"}),
            ("read_file", {"path": "agents/run.txt", "offset": None, "limit": None}),
            ("list_files", {"path": None, "glob": None, "depth": None}),
            ("read_file", {"path": "nowhere.txt", "offset": None, "limit": None}),
        ]
        model = ScriptedModel(calls)
        agent = Agent(
            name="cubby-agent",
            instructions="Use the tools.",
            model=model,
            mcp_servers=[server],
            mcp_config={"convert_schemas_to_strict": True},
        )
        result = await Runner.run(agent, "use the tools", max_turns=len(calls) + 2)
        check(result.final_output == "done", lambda: f"final output {result.final_output!r}")
        seen = model.tools[0]
        check(sorted(t.name for t in seen) == sorted(names), lambda: f"tools given to the model {seen}")
        check(all(t.strict_json_schema for t in seen), "strict tools given to the model")
        outputs = {}
        for item in model.inputs[-1]:
            if isinstance(item, dict) and item.get("type") == "function_call_output":
                outputs[item["call_id"]] = item["output"]
        check(len(outputs) == len(calls), lambda: f"tool outputs {outputs}")
        texts = {k: out_text(v) for k, v in outputs.items()}
        check(texts["call_0"].startswith("Created `agents/run.txt`"), lambda: f"run write_file {texts}")
        check(texts["call_1"] == "     1\trun\n", lambda: f"run read_file {texts}")
        check("agents/run.txt" in texts["call_2"], lambda: f"run list_files {texts}")
        check(texts["call_3"].startswith("ERROR "), lambda: f"run error {texts}")
        check(open(f"{workspace}/agents/run.txt").read() == "run\n", "run.txt on disk")

        print(f"ok: agents sdk client ({len(tools)} tools, protocol {protocol})")
    finally:
        await server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
