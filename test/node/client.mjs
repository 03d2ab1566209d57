// Starts `mcp-forge serve` with the official TypeScript SDK client, lists the
// tools and runs calls, including every kind of error a tool can answer. The
// SDK validates each structured result against the tool's output schema, so
// a result that breaks its own schema fails here.
// Usage: node client.mjs /path/to/mcp-forge [--config FILE]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, ...rest] = process.argv.slice(2);
const transport = new StdioClientTransport({ command: bin, args: [...rest, "serve"], stderr: "inherit" });
const client = new Client({ name: "ts-sdk-e2e", version: "1.0.0" });
await client.connect(transport);

const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const tools = await client.listTools();
const names = tools.tools.map((t) => t.name);
for (const want of ["execute_python", "execute_r", "document_state"]) if (!names.includes(want)) fail(`tools: ${names}`);
const schema = tools.tools.find((t) => t.name === "execute_python").inputSchema;
if (!schema.required?.includes("code")) fail(`schema: ${JSON.stringify(schema)}`);

const res = await client.callTool({ name: "execute_python", arguments: { code: "print('from node')\nsum([20, 22])" } });
if (res.isError) fail(JSON.stringify(res));
if (JSON.parse(res.structuredContent?.result) !== 42) fail(`result: ${JSON.stringify(res.structuredContent)}`);
if (res.structuredContent?.stdout !== "from node\n") fail(`stdout: ${JSON.stringify(res.structuredContent)}`);
if (res.structuredContent?.backend !== "python") fail(`backend: ${JSON.stringify(res.structuredContent)}`);

const bad = await client.callTool({ name: "execute_python", arguments: { code: "1/0" } });
if (!bad.isError || bad.structuredContent?.error?.type !== "ZeroDivisionError") fail(`error case: ${JSON.stringify(bad)}`);

// Every error path: a tool result with isError whose structured content the
// SDK has validated against the output schema (callTool throws otherwise).
const session = await client.callTool({ name: "execute_python", arguments: { code: "x = 1", session_id: "ts" } });
if (session.isError) fail(`session: ${JSON.stringify(session)}`);
const errors = [
  ["execute_python", { code: "" }, "code is empty"],
  ["execute_python", { code: "1", timeout: 99999 }, "execution.max_timeout"],
  ["execute_python", { code: "1", custom_image: "docker.io/library/python:3" }, "images.allowed"],
  ["execute_python", { code: "1", environment: { TOKEN: "a\u0000b" } }, "NUL"],
  ["execute_python", { code: "1", session_id: "../../etc" }, "is invalid"],
  ["execute_r", { code: "1", session_id: "ts" }, "runs Python"],
  ["restart_session", { session_id: "nope" }, "no such session"],
  ["restart_session", { session_id: "../x" }, "is invalid"],
  ["document_state", { session_id: "nope", note: "n" }, "no such session"],
  ["document_state", { session_id: "a/b" }, "is invalid"],
  ["document_state", { session_id: "ts", variables: { "": "x" } }, "variable name"],
  ["destroy_session", { session_id: "nope" }, "no such session"],
  ["destroy_session", { session_id: "x".repeat(129) }, "is invalid"],
];
for (const [name, args, want] of errors) {
  let r;
  try {
    r = await client.callTool({ name, arguments: args });
  } catch (e) {
    fail(`${name} ${JSON.stringify(args)}: ${e}`);
  }
  if (!r.isError || !r.structuredContent?.error?.message?.includes(want)) fail(`${name} ${JSON.stringify(args)}: ${JSON.stringify(r)}`);
}
const list = await client.callTool({ name: "list_sessions", arguments: {} });
if (list.structuredContent?.sessions?.length !== 1) fail(`list_sessions: ${JSON.stringify(list)}`);
const gone = await client.callTool({ name: "destroy_session", arguments: { session_id: "ts" } });
if (gone.isError || !gone.structuredContent?.destroyed) fail(`destroy: ${JSON.stringify(gone)}`);

const resources = await client.listResources();
if (!resources.resources.some((r) => r.uri === "mcp://forge/environment/info")) fail("environment resource missing");
console.log(`ok: tools=${names.join(",")} result=${res.structuredContent.result} errors=${errors.length}`);
await client.close();
