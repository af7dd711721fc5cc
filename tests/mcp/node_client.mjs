// Lists and calls cubby's tools over stdio with the TypeScript MCP SDK Client.
// Usage: node node_client.mjs CUBBY_BIN WORKSPACE [CONFIG]
// Without CONFIG, cubby's defaults: text results only, no outputSchema. With
// CONFIG (a cubby.toml with `[mcp] structured_content = true`): both, and the
// SDK validates structuredContent against each tool's outputSchema.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [cubby, workspace, config] = process.argv.slice(2);
const structured = Boolean(config);
const check = (cond, what) => {
  if (!cond) throw new Error(`check failed: ${what}`);
};

const transport = new StdioClientTransport({
  command: cubby,
  args: ["mcp", "--root", workspace, "--provider", "local", ...(config ? ["--config", config] : [])],
  stderr: "ignore",
});
const client = new Client({ name: "cubby-node-test", version: "1.0.0" });
await client.connect(transport);

check(client.getServerVersion()?.name === "cubby", "server name");
const { tools } = await client.listTools();
const names = tools.map((t) => t.name);
for (const t of ["read_file", "write_file", "edit_file", "search", "run", "process_logs"]) {
  check(names.includes(t), `${t} listed`);
}
for (const t of tools) {
  check(t.inputSchema.type === "object", `${t.name} input schema`);
  if (structured) check(t.outputSchema?.type === "object", `${t.name} output schema`);
  else check(t.outputSchema === undefined, `${t.name} has an output schema`);
}

// With structured content on, the SDK validates it against each tool's
// outputSchema; off, there is none and the text is the result.
let r = await client.callTool({ name: "read_file", arguments: { path: "seed.txt" } });
check(!r.isError && r.content[0].text === "     1\tseed\n", JSON.stringify(r));
if (structured) check(r.structuredContent.total_lines === 1, "structured content");
else check(r.structuredContent === undefined, `structured content sent: ${JSON.stringify(r)}`);

r = await client.callTool({ name: "list_files", arguments: {} });
check(!r.isError && r.content[0].text.split("\n").includes("seed.txt"), JSON.stringify(r));
if (structured) check(r.structuredContent.entries.includes("seed.txt"), JSON.stringify(r));
else check(r.structuredContent === undefined, `structured content sent: ${JSON.stringify(r)}`);

r = await client.callTool({ name: "read_file", arguments: { path: "/etc/passwd" } });
check(r.isError && r.content[0].text.startsWith("ERROR path_escape:"), JSON.stringify(r));

const progress = [];
r = await client.callTool(
  { name: "run", arguments: { command: "echo one; sleep 0.2; echo two" } },
  CallToolResultSchema,
  { onprogress: (p) => progress.push(p.message ?? "") },
);
check(!r.isError && r.content[0].text.startsWith("OK exit=0"), JSON.stringify(r));
// cubby sends every chunk as progress before the result, in order. The SDK
// handles a notification on a microtask but a response at once, so when the
// last notification and the result arrive in one read it drops that
// notification (its request is already done): the chunks seen are a prefix.
const seen = progress.join("");
check(seen.startsWith("one\n") && "one\ntwo\n".startsWith(seen), `progress ${JSON.stringify(progress)}`);

await client.close();
console.log(`ok: node client${structured ? " structured" : ""}`);
