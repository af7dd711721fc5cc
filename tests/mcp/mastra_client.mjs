// Lists and executes cubby's tools over stdio with Mastra's `MCPClient`
// (`@mastra/mcp`), without a language model:
//   1. two stdio servers: `cubby` (the default handshake, `server/discover`
//      first; with CONFIG, `[mcp] structured_content = true`) and `legacy`
//      (`protocolVersion: "legacy"`: `initialize`, and `onToolError:
//      "return"`; cubby's defaults: text results only, no outputSchema);
//   2. `listTools()` (namespaced `server_tool`), `listToolsets()` and
//      `listToolDefinitions()`;
//   3. `tool.execute(input, context)`: Mastra validates the input against
//      the tool's JSON schema and a successful result's `structuredContent`
//      against its output schema (`cubby`), or returns the result with
//      cubby's text (`legacy`); an error result throws (or is returned with
//      `onToolError: "return"`);
//   4. a Mastra `Agent` with a scripted mock model (`ai/test`) posing as an
//      OpenAI model, so Mastra applies its OpenAI schema compatibility layer
//      to every tool, then executes the model's calls.
// Usage: node mastra_client.mjs CUBBY_BIN WORKSPACE LEGACY_WORKSPACE CONFIG
import { Agent } from "@mastra/core/agent";
import { MCPClient } from "@mastra/mcp";
import { scriptedModel } from "./scripted_model.mjs";

const [cubby, workspace, legacyWorkspace, config] = process.argv.slice(2);
const check = (cond, what) => {
  if (!cond) throw new Error(`check failed: ${typeof what === "function" ? what() : what}`);
};
const show = (v) => JSON.stringify(v);
const textOf = (r) => (r?.content ?? []).map((c) => c.text ?? "").join("");

// Ajv (Mastra's schema validator) warns once per compiled schema about the
// formats it does not know in cubby's schemas (`format: "uint64"`, ...):
// collected here and reported on one line instead of flooding the output.
const formatWarnings = new Set();
const warn = console.warn;
console.warn = (...args) => {
  const m = String(args[0]).match(/^unknown format "([^"]+)" ignored/);
  if (m) formatWarnings.add(m[1]);
  else warn(...args);
};

const EXPECTED = [
  "read_file", "write_file", "edit_file", "glob", "list_files", "search", "changes",
  "view_file", "run", "start_process", "process_logs", "stop_process",
  "list_processes", "write_stdin", "preview",
];
const server = (root, extra, args = []) => ({
  command: cubby,
  args: ["mcp", "--root", root, "--provider", "local", ...args],
  enableServerLogs: false,
  timeout: 60000,
  ...extra,
});

const mcp = new MCPClient({
  id: "cubby-mastra-test",
  servers: {
    cubby: server(workspace, {}, ["--config", config]),
    legacy: server(legacyWorkspace, { protocolVersion: "legacy", onToolError: "return" }),
  },
});
try {
  // 2. Listing.
  const tools = await mcp.listTools();
  for (const srv of ["cubby", "legacy"]) {
    for (const name of EXPECTED) {
      check(tools[`${srv}_${name}`], () => `${srv}_${name} in ${show(Object.keys(tools))}`);
    }
  }
  check(Object.keys(tools).length === 2 * EXPECTED.length, () => `tools ${show(Object.keys(tools))}`);
  for (const [id, t] of Object.entries(tools)) {
    check(t.id === id && typeof t.execute === "function", `${id} execute`);
    check(t.inputSchema, `${id} input schema`);
    if (id.startsWith("cubby_")) check(t.outputSchema, `${id} output schema`);
    check(t.mcp?.annotations && typeof t.mcp.annotations.readOnlyHint === "boolean", `${id} annotations`);
  }
  check(tools.cubby_read_file.mcp.annotations.readOnlyHint === true, "read_file read-only");
  check(tools.cubby_write_file.mcp.annotations.destructiveHint === true, "write_file destructive");
  const toolsets = await mcp.listToolsets();
  check(
    show(Object.keys(toolsets.cubby).sort()) === show([...EXPECTED].sort()),
    () => `toolset ${show(Object.keys(toolsets.cubby ?? {}))}`,
  );
  const defs = await mcp.listToolDefinitions();
  for (const name of EXPECTED) {
    const d = defs.cubby?.[name];
    check(
      d?.inputSchema?.type === "object" && d?.outputSchema?.type === "object",
      () => `definition ${name} ${show(d)}`,
    );
  }
  for (const name of EXPECTED) {
    const d = defs.legacy?.[name];
    check(d?.inputSchema?.type === "object" && d.outputSchema === undefined, () => `legacy definition ${name} ${show(d)}`);
  }
  check((mcp.getServerInstructions().cubby ?? "").includes("workspace"), "server instructions");
  const protocols = mcp.getServerProtocolVersions();
  check(protocols.cubby === "2026-07-28", () => `cubby negotiated ${show(protocols)}`);
  check(protocols.legacy && protocols.legacy < "2026-07-28", () => `legacy negotiated ${show(protocols)}`);

  // 3. Direct execution. A successful call returns the structuredContent,
  //    validated against the output schema (a mismatch comes back as
  //    `{ error: true, ... }`); the MCP content rides along, not enumerable.
  const ok = (v, what) => check(v && v.error !== true, () => `${what} ${show(v)}`);
  let v = await tools.cubby_write_file.execute({ path: "mastra/notes.txt", content: "alpha\nbeta\n" }, {});
  ok(v, "write_file");
  check(v.created === true && v.path === "mastra/notes.txt" && v.size === 11, () => `write_file ${show(v)}`);
  v = await tools.cubby_read_file.execute({ path: "mastra/notes.txt" }, {});
  ok(v, "read_file");
  check(v.content === "alpha\nbeta\n" && v.total_lines === 2, () => `read_file ${show(v)}`);
  v = await tools.cubby_list_files.execute({}, {});
  ok(v, "list_files");
  check(v.entries.includes("mastra/notes.txt") && v.truncated === false, () => `list_files ${show(v)}`);
  // Optional arguments sent as null, as a strict-mode model does.
  v = await tools.cubby_list_files.execute({ path: null, glob: "*.txt", depth: null }, {});
  ok(v, "list_files with nulls");
  check(v.entries.includes("mastra/notes.txt"), () => `list_files with nulls ${show(v)}`);
  v = await tools.cubby_search.execute({ query: "beta" }, {});
  ok(v, "search");
  check(v.total === 1 && v.matches[0].line === 2, () => `search ${show(v)}`);
  v = await tools.cubby_run.execute({ command: "echo hi" }, {});
  ok(v, "run");
  check(v.exit_code === 0 && v.output === "hi\n", () => `run ${show(v)}`);
  v = await tools.cubby_view_file.execute({ path: "seed.txt" }, {});
  ok(v, "view_file");
  check(v.kind === "text" && v.text?.content === "seed\n", () => `view_file ${show(v)}`);
  // Mastra checks the input against cubby's schema before calling.
  v = await tools.cubby_read_file.execute({ nopath: 1 }, {});
  check(v?.error === true && /path/.test(v.message), () => `invalid input ${show(v)}`);
  // An error result: thrown by default, returned with onToolError "return".
  let thrown;
  try {
    v = await tools.cubby_read_file.execute({ path: "missing.txt" }, {});
  } catch (e) {
    thrown = e;
  }
  check(
    thrown && String(thrown.message).startsWith("ERROR "),
    () => `missing read_file ${thrown} ${show(v)}`,
  );
  v = await tools.legacy_read_file.execute({ path: "missing.txt" }, {});
  check(v?.isError === true && textOf(v).startsWith("ERROR "), () => `legacy missing read_file ${show(v)}`);
  // Without structured content Mastra returns the result: cubby's text.
  v = await tools.legacy_write_file.execute({ path: "legacy.txt", content: "old\n" }, {});
  ok(v, "legacy write_file");
  check(!v.isError && textOf(v).startsWith("Created `legacy.txt`"), () => `legacy write_file ${show(v)}`);
  check(v.structuredContent === undefined, () => `legacy write_file structured ${show(v)}`);
  v = await tools.legacy_read_file.execute({ path: "legacy.txt" }, {});
  check(textOf(v) === "     1\told\n", () => `legacy read_file ${show(v)}`);
  v = await tools.legacy_list_files.execute({}, {});
  check(textOf(v) === "legacy.txt", () => `legacy list_files ${show(v)}`);

  // 4. An agent loop with a scripted model that calls the tools.
  const calls = [
    ["cubby_write_file", { path: "mastra/loop.txt", content: "loop\n" }],
    ["cubby_read_file", { path: "mastra/loop.txt", offset: null, limit: null }],
    ["cubby_list_files", { path: null, glob: null, depth: null }],
    ["cubby_read_file", { path: "nowhere.txt", offset: null, limit: null }],
  ];
  const { model, seen } = scriptedModel(calls, { provider: "openai.responses", modelId: "gpt-4.1" });
  const cubbyTools = Object.fromEntries(Object.entries(tools).filter(([k]) => k.startsWith("cubby_")));
  const agent = new Agent({
    id: "cubby-agent",
    name: "cubby-agent",
    instructions: "Use the tools.",
    model,
    tools: cubbyTools,
  });
  const result = await agent.generate("use the tools", { maxSteps: calls.length + 2 });
  check(result.text === "done", () => `agent text ${show(result.text)} ${show(result.error)}`);
  check(
    show(seen.tools.map((t) => t.name).sort()) === show(Object.keys(cubbyTools).sort()),
    () => `tools given to the model ${show(seen.tools.map((t) => t.name))}`,
  );
  for (const t of seen.tools) {
    const own = defs.cubby[t.name.slice("cubby_".length)].inputSchema;
    check(t.type === "function" && t.inputSchema?.type === "object", () => `${t.name} given as ${show(t)}`);
    check(
      show(Object.keys(t.inputSchema.properties ?? {}).sort()) === show(Object.keys(own.properties).sort()),
      () => `${t.name} properties given to the model ${show(t.inputSchema)}`,
    );
  }
  const results = Object.fromEntries(result.toolResults.map((r) => [r.payload.toolCallId, r.payload.result]));
  check(results["call-0"]?.created === true, () => `agent write_file ${show(results)}`);
  check(results["call-1"]?.content === "loop\n", () => `agent read_file ${show(results)}`);
  check(results["call-2"]?.entries?.includes("mastra/loop.txt"), () => `agent list_files ${show(results)}`);
  // The failed call reaches the model as an error carrying cubby's text.
  const toolMsg = model.doGenerateCalls[calls.length].prompt.filter((m) => m.role === "tool").at(-1);
  const failed = toolMsg?.content.find((p) => p.toolCallId === `call-${calls.length - 1}`);
  check(
    failed?.output?.type === "error-text" && failed.output.value.startsWith("ERROR "),
    () => `model sees the error ${show(toolMsg)}`,
  );

  const formats = [...formatWarnings].sort().join(", ") || "none";
  console.log(`note: Ajv ignored unknown formats in cubby's schemas: ${formats}`);
  console.log(
    `ok: mastra client (${EXPECTED.length} tools on 2 servers, ` +
      `protocols ${protocols.cubby} and ${protocols.legacy})`,
  );
} finally {
  await mcp.disconnect();
}
