// Starts `mcp-forge serve` with the official TypeScript SDK client, lists the
// tools and runs one call. Usage: node client.mjs /path/to/mcp-forge [--config FILE]
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
if (res.structuredContent?.result !== 42) fail(`result: ${JSON.stringify(res.structuredContent)}`);
if (res.structuredContent?.stdout !== "from node\n") fail(`stdout: ${JSON.stringify(res.structuredContent)}`);

const bad = await client.callTool({ name: "execute_python", arguments: { code: "1/0" } });
if (!bad.isError || bad.structuredContent?.error?.type !== "ZeroDivisionError") fail(`error case: ${JSON.stringify(bad)}`);

const resources = await client.listResources();
if (!resources.resources.some((r) => r.uri === "mcp://forge/environment/info")) fail("environment resource missing");
console.log(`ok: tools=${names.join(",")} result=${res.structuredContent.result}`);
await client.close();
