// Lists and executes cubby's tools over stdio with the Vercel AI SDK's MCP
// client (`createMCPClient` from `@ai-sdk/mcp`, `StdioMCPTransport` from
// `@ai-sdk/mcp/mcp-stdio`), without a language model:
//   1. `client.listTools()`: every tool, with its input and output schema;
//   2. `client.tools()` (automatic schemas): each tool's JSON schema goes
//      through `asSchema`, tools run with `tool.execute(args, {toolCallId,
//      messages})`;
//   3. on a second connection with CONFIG (`[mcp] structured_content =
//      true`), `client.tools({ schemas })` with zod schemas built from
//      cubby's own input and output schemas (`z.fromJSONSchema`): the SDK
//      validates `structuredContent` against the output schema and returns it;
//   4. `generateText` with a scripted mock model (`ai/test`) that calls the
//      tools: the SDK hands every tool definition to the model, parses the
//      calls, executes them and converts the results for the model, which
//      gets cubby's text (numbered lines, no JSON);
//   5. a third connection with `protocolVersionDiscovery: false`: the
//      `initialize` handshake instead of `server/discover`.
// Connections 1 and 3 run with cubby's defaults: text results only, no
// outputSchema.
// Usage: node ai_sdk_client.mjs CUBBY_BIN WORKSPACE CONFIG
import { createMCPClient } from "@ai-sdk/mcp";
import { StdioMCPTransport } from "@ai-sdk/mcp/mcp-stdio";
import { asSchema, generateText, stepCountIs } from "ai";
import { scriptedModel } from "./scripted_model.mjs";
import { z } from "zod";

const [cubby, workspace, config] = process.argv.slice(2);
const check = (cond, what) => {
  if (!cond) throw new Error(`check failed: ${typeof what === "function" ? what() : what}`);
};
const show = (v) => JSON.stringify(v);
const textOf = (r) => (r.content ?? []).map((c) => c.text ?? "").join("");

const EXPECTED = [
  "read_file", "write_file", "edit_file", "glob", "list_files", "search", "changes",
  "view_file", "run", "start_process", "process_logs", "stop_process",
  "list_processes", "write_stdin", "preview",
];

const client = await createMCPClient({
  transport: new StdioMCPTransport({
    command: cubby,
    args: ["mcp", "--root", workspace, "--provider", "local"],
    stderr: "ignore",
  }),
  clientName: "cubby-ai-sdk-test",
});
try {
  check(client.serverInfo?.name === "cubby", () => `server info ${show(client.serverInfo)}`);
  const protocol = client.initializeResult?.protocolVersion;
  // The transport supports discovery: the session opened with server/discover.
  check(protocol === "2026-07-28", () => `protocol version ${show(client.initializeResult)}`);
  check((client.instructions ?? "").includes("workspace"), "instructions");

  // 1. The raw listing.
  const { tools: defs } = await client.listTools();
  const names = defs.map((t) => t.name);
  for (const name of EXPECTED) check(names.includes(name), `${name} listed in ${show(names)}`);
  for (const t of defs) {
    check(t.inputSchema?.type === "object", `${t.name} input schema`);
    check(t.outputSchema === undefined, () => `${t.name} has an output schema`);
  }
  const byName = Object.fromEntries(defs.map((t) => [t.name, t]));

  // 2. Automatic schemas: every tool becomes a dynamic AI SDK tool.
  const tools = await client.tools();
  check(
    show(Object.keys(tools).sort()) === show([...names].sort()),
    () => `tools() names ${show(Object.keys(tools))}`,
  );
  for (const [name, t] of Object.entries(tools)) {
    check(typeof t.execute === "function", `${name} execute`);
    const schema = await asSchema(t.inputSchema).jsonSchema;
    check(
      schema.type === "object" && schema.additionalProperties === false,
      () => `${name} schema ${show(schema)}`,
    );
  }
  const opts = (id) => ({ toolCallId: id, messages: [] });
  const lines = (r) => textOf(r).split("\n");
  let r = await tools.write_file.execute({ path: "ai/notes.txt", content: "alpha\nbeta\n" }, opts("w1"));
  check(!r.isError && textOf(r).startsWith("Created `ai/notes.txt`"), () => `write_file ${show(r)}`);
  check(r.structuredContent === undefined, () => `write_file structured ${show(r)}`);
  r = await tools.read_file.execute({ path: "ai/notes.txt" }, opts("r1"));
  check(!r.isError && textOf(r) === "     1\talpha\n     2\tbeta\n", () => `read_file ${show(r)}`);
  check(r.structuredContent === undefined, () => `read_file structured ${show(r)}`);
  r = await tools.list_files.execute({}, opts("l1"));
  check(!r.isError && lines(r).includes("ai/notes.txt"), () => `list_files ${show(r)}`);
  r = await tools.read_file.execute({ path: "missing.txt" }, opts("e1"));
  check(r.isError === true && textOf(r).startsWith("ERROR "), () => `missing read_file ${show(r)}`);

  // 3. Typed tools, on a connection with structured content on: zod schemas
  //    converted from cubby's JSON schemas; the SDK validates
  //    structuredContent against the output schema.
  const structured = await createMCPClient({
    transport: new StdioMCPTransport({
      command: cubby,
      args: ["mcp", "--root", workspace, "--provider", "local", "--config", config],
      stderr: "ignore",
    }),
    clientName: "cubby-ai-sdk-test",
  });
  try {
  const { tools: typedDefs } = await structured.listTools();
  check(
    show(typedDefs.map((t) => t.name)) === show(names),
    () => `structured tools ${show(typedDefs.map((t) => t.name))}`,
  );
  for (const t of typedDefs) check(t.outputSchema?.type === "object", `${t.name} output schema`);
  const typed = Object.fromEntries(
    typedDefs.map((t) => [
      t.name,
      { inputSchema: z.fromJSONSchema(t.inputSchema), outputSchema: z.fromJSONSchema(t.outputSchema) },
    ]),
  );
  for (const [name, s] of Object.entries(typed)) {
    // Every zod schema must convert back to a JSON schema for a model.
    const back = await asSchema(s.inputSchema).jsonSchema;
    check(back.type === "object", () => `${name} zod input schema ${show(back)}`);
  }
  check(typed.read_file.inputSchema.safeParse({ path: "x" }).success, "read_file input accepts a path");
  check(!typed.read_file.inputSchema.safeParse({}).success, "read_file input requires a path");
  check(!typed.read_file.inputSchema.safeParse({ path: "x", nope: 1 }).success, "read_file input is closed");
  const typedTools = await structured.tools({ schemas: typed });
  check(Object.keys(typedTools).length === defs.length, "typed tools");
  let v = await typedTools.write_file.execute({ path: "ai/typed.txt", content: "typed\n" }, opts("w2"));
  check(v.created === true && v.path === "ai/typed.txt" && v.size === 6, () => `typed write_file ${show(v)}`);
  v = await typedTools.read_file.execute({ path: "ai/typed.txt" }, opts("r2"));
  check(
    v.content === "typed\n" && v.total_lines === 1 && v.binary === false,
    () => `typed read_file ${show(v)}`,
  );
  v = await typedTools.list_files.execute({}, opts("l2"));
  check(v.entries.includes("ai/typed.txt") && v.truncated === false, () => `typed list_files ${show(v)}`);
  v = await typedTools.glob.execute({ pattern: "**/*.txt" }, opts("g2"));
  check(v.entries.includes("ai/typed.txt"), () => `typed glob ${show(v)}`);
  v = await typedTools.search.execute({ query: "alpha" }, opts("s2"));
  check(v.total === 1 && v.matches[0].path === "ai/notes.txt", () => `typed search ${show(v)}`);
  v = await typedTools.run.execute({ command: "echo hi" }, opts("x2"));
  check(v.exit_code === 0 && v.output === "hi\n", () => `typed run ${show(v)}`);
  v = await typedTools.changes.execute({}, opts("c2"));
  check(Array.isArray(v.changes), () => `typed changes ${show(v)}`);
  v = await typedTools.list_processes.execute({}, opts("p2"));
  check(Array.isArray(v.processes), () => `typed list_processes ${show(v)}`);
  v = await typedTools.view_file.execute({ path: "seed.txt" }, opts("v2"));
  check(v.kind === "text" && v.text?.content === "seed\n", () => `typed view_file ${show(v)}`);
  // An error result is returned as is (no output validation).
  v = await typedTools.read_file.execute({ path: "missing.txt" }, opts("e2"));
  check(v.isError === true && textOf(v).startsWith("ERROR "), () => `typed error ${show(v)}`);
  check(v.structuredContent === undefined, () => `typed error structured ${show(v)}`);
  } finally {
    await structured.close();
  }

  // 4. An agent loop with a scripted model: the SDK passes every tool to the
  //    model, validates and executes its calls, and feeds the results back.
  const calls = [
    ["write_file", { path: "ai/loop.txt", content: "loop\n" }],
    ["read_file", { path: "ai/loop.txt" }],
    ["list_files", {}],
    ["read_file", { path: "nowhere.txt" }],
  ];
  const { model, seen } = scriptedModel(calls);
  const result = await generateText({
    model,
    tools,
    prompt: "use the tools",
    stopWhen: stepCountIs(calls.length + 1),
  });
  check(result.text === "done", () => `generateText text ${show(result.text)}`);
  check(result.steps.length === calls.length + 1, () => `steps ${result.steps.length}`);
  check(
    show(seen.tools.map((t) => t.name).sort()) === show([...names].sort()),
    () => `tools given to the model ${show(seen.tools.map((t) => t.name))}`,
  );
  for (const t of seen.tools) {
    check(t.type === "function", `${t.name} is a function tool`);
    check(
      show(t.inputSchema.required ?? []) === show(byName[t.name].inputSchema.required ?? []),
      () => `${t.name} schema given to the model ${show(t.inputSchema)}`,
    );
  }
  const errors = result.steps.flatMap((s) => s.content.filter((p) => p.type === "tool-error"));
  check(errors.length === 0, () => `tool errors ${show(errors)}`);
  const out = (i) => result.steps[i].toolResults.find((x) => x.toolCallId === `call-${i}`)?.output;
  check(textOf(out(0)).startsWith("Created `ai/loop.txt`"), () => `loop write_file ${show(out(0))}`);
  check(textOf(out(1)) === "     1\tloop\n", () => `loop read_file ${show(out(1))}`);
  check(lines(out(2)).includes("ai/loop.txt"), () => `loop list_files ${show(out(2))}`);
  check(out(3)?.isError === true && textOf(out(3)).startsWith("ERROR "), () => `loop error ${show(out(3))}`);
  // What the model got back (mcpToModelOutput): cubby's text, not JSON of
  // the structured value.
  const toolParts = model.doGenerateCalls[calls.length].prompt
    .filter((m) => m.role === "tool")
    .flatMap((m) => m.content);
  const given = (i) => show(toolParts.find((p) => p.toolCallId === `call-${i}`)?.output);
  check(given(1).includes(show("     1\tloop\n").slice(1, -1)), () => `model sees the lines ${given(1)}`);
  check(!given(1).includes("total_lines"), () => `model sees structured content ${given(1)}`);
  check(given(calls.length - 1).includes("ERROR "), () => `model sees the error ${given(calls.length - 1)}`);

  console.log(`ok: ai sdk client (${defs.length} tools, protocol ${protocol})`);
} finally {
  await client.close();
}

// 5. The same over the initialize handshake (protocolVersionDiscovery off),
//    once the first cubby has exited.
const legacy = await createMCPClient({
  transport: new StdioMCPTransport({
    command: cubby,
    args: ["mcp", "--root", workspace, "--provider", "local"],
    stderr: "ignore",
  }),
  clientName: "cubby-ai-sdk-test",
  protocolVersionDiscovery: false,
});
try {
  const protocol = legacy.initializeResult?.protocolVersion;
  check(
    legacy.serverInfo?.name === "cubby" && protocol < "2026-07-28",
    () => `legacy ${show(legacy.initializeResult)}`,
  );
  const tools = await legacy.tools();
  check(Object.keys(tools).length === EXPECTED.length, () => `legacy tools ${show(Object.keys(tools))}`);
  const opts = (id) => ({ toolCallId: id, messages: [] });
  let r = await tools.read_file.execute({ path: "ai/notes.txt" }, opts("r"));
  check(!r.isError && textOf(r) === "     1\talpha\n     2\tbeta\n", () => `legacy read_file ${show(r)}`);
  check(r.structuredContent === undefined, () => `legacy read_file structured ${show(r)}`);
  r = await tools.write_file.execute({ path: "ai/notes.txt", content: "gamma\n" }, opts("w"));
  check(!r.isError && textOf(r).startsWith("Wrote `ai/notes.txt`"), () => `legacy write_file ${show(r)}`);
  r = await tools.list_files.execute({}, opts("l"));
  check(!r.isError && textOf(r).split("\n").includes("ai/typed.txt"), () => `legacy list_files ${show(r)}`);
  r = await tools.read_file.execute({ path: "missing.txt" }, opts("e"));
  check(r.isError === true && textOf(r).startsWith("ERROR "), () => `legacy error ${show(r)}`);
  console.log(`ok: ai sdk client over initialize (protocol ${protocol})`);
} finally {
  await legacy.close();
}
