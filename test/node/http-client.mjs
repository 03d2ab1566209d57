// The official TypeScript SDK client against `mcp-forge serve --http` over
// streamable HTTP: without a key it gets 401; with FORGE_KEY it runs the
// stdio client's checks and a session.
// Usage: FORGE_KEY=... node http-client.mjs http://127.0.0.1:PORT/mcp
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);
const key = process.env.FORGE_KEY;
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };

// No key, then a wrong key: 401 and no connection.
for (const auth of [undefined, "Bearer mcpf_not_a_key"]) {
  const headers = auth ? { Authorization: auth } : {};
  const t = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  const c = new Client({ name: "ts-sdk-http-e2e", version: "1.0.0" });
  let err;
  try { await c.connect(t); } catch (e) { err = e; }
  if (!err) fail(`connected with ${auth ?? "no key"}`);
  if (err?.code !== 401) fail(`expected HTTP 401 with ${auth ?? "no key"}, got: ${err} (code ${err?.code})`);
  await c.close().catch(() => {});
}

const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
const client = new Client({ name: "ts-sdk-http-e2e", version: "1.0.0" });
await client.connect(transport);

const tools = await client.listTools();
const names = tools.tools.map((t) => t.name);
for (const want of ["execute_python", "execute_r", "document_state"]) if (!names.includes(want)) fail(`tools: ${names}`);
const schema = tools.tools.find((t) => t.name === "execute_python").inputSchema;
if (!schema.required?.includes("code")) fail(`schema: ${JSON.stringify(schema)}`);

const res = await client.callTool({ name: "execute_python", arguments: { code: "print('from node')\nsum([20, 22])" } });
if (res.isError) fail(JSON.stringify(res));
if (res.structuredContent?.result !== "42") fail(`result: ${JSON.stringify(res.structuredContent)}`);
if (res.structuredContent?.stdout !== "from node\n") fail(`stdout: ${JSON.stringify(res.structuredContent)}`);

const bad = await client.callTool({ name: "execute_python", arguments: { code: "1/0" } });
if (!bad.isError || bad.structuredContent?.error?.type !== "ZeroDivisionError") fail(`error case: ${JSON.stringify(bad)}`);

await client.callTool({ name: "execute_python", arguments: { code: "n = 41", session_id: "ts" } });
const again = await client.callTool({ name: "execute_python", arguments: { code: "n + 1", session_id: "ts" } });
if (again.structuredContent?.result !== "42") fail(`session: ${JSON.stringify(again)}`);

const resources = await client.listResources();
if (!resources.resources.some((r) => r.uri === "mcp://forge/environment/info")) fail("environment resource missing");
console.log(`ok: tools=${names.join(",")} result=${res.structuredContent.result} protocol=${transport.protocolVersion ?? "?"}`);
await client.close();
