// build_environment as an MCP Task, through the official TypeScript SDK's
// own task API (client.experimental.tasks) over stdio:
//  1. tools/list offers build_environment as a task (execution.taskSupport);
//  2. a build made a task answers at once with the task, and its result is
//     the tool's own answer (the image), naming the task;
//  3. a build that waits (the test builder's slowpkg) is cancelled: at once,
//     terminal, and the builder stops;
//  4. tasks/list holds both; a plain call still answers as before; a task
//     of a tool that cannot be one is refused.
// Usage: node build-task.mjs /path/to/mcp-forge --config FILE
// (the server's environment is passed on: FORGE_* settings of the test).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [bin, ...rest] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const client = new Client({ name: "ts-sdk-build-task", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: bin, args: [...rest, "serve"], env: process.env, stderr: "inherit" }));

// 1.
const tool = (await client.listTools()).tools.find((t) => t.name === "build_environment");
if (tool?.execution?.taskSupport !== "optional") fail(`build_environment's execution: ${JSON.stringify(tool?.execution)}`);

// 2.
const t0 = Date.now();
let created, createdMs, result;
for await (const m of client.experimental.tasks.callToolStream({ name: "build_environment", arguments: { name: "tasky", template: "demo" } }, CallToolResultSchema, { task: {} })) {
  if (m.type === "taskCreated") { created = m.task; createdMs = Date.now() - t0; }
  if (m.type === "result") result = m.result;
  if (m.type === "error") fail(`build task: ${m.error.message}`);
}
if (!created?.taskId?.startsWith("task-")) fail(`created: ${JSON.stringify(created)}`);
if (result?.isError || result?.structuredContent?.success !== true || result.structuredContent.image !== "mcp-forge/custom:tasky") fail(`build result: ${JSON.stringify(result)}`);
if (result._meta?.["io.modelcontextprotocol/related-task"]?.taskId !== created.taskId) fail(`result's related task: ${JSON.stringify(result._meta)}`);
if ((await client.experimental.tasks.getTask(created.taskId)).status !== "completed") fail("the finished build's task is not completed");

// 3.
const stream = client.experimental.tasks.callToolStream({ name: "build_environment", arguments: { name: "slowtask", packages: ["slowpkg"] } }, CallToolResultSchema, { task: {} });
let slow;
for await (const m of stream) {
  if (m.type === "taskCreated") { slow = m.task; await stream.return(); break; }
  if (m.type === "error") fail(`slow build: ${m.error.message}`);
}
if (!slow) fail("no task for the slow build");
await sleep(1500);
if ((await client.experimental.tasks.getTask(slow.taskId)).status !== "working") fail("the slow build is not working");
const cancelled = await client.experimental.tasks.cancelTask(slow.taskId);
if (cancelled.status !== "cancelled") fail(`cancel: ${JSON.stringify(cancelled)}`);
try {
  await client.experimental.tasks.cancelTask(slow.taskId);
  fail("cancelling again was answered");
} catch (e) {
  if (!/terminal/.test(e.message)) fail(`cancelling again: ${e.message}`);
}
const slowResult = await client.experimental.tasks.getTaskResult(slow.taskId, CallToolResultSchema);
if (!slowResult.isError) fail(`the cancelled build's answer: ${JSON.stringify(slowResult)}`);

// 4.
const listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
for (const t of [created, slow]) if (!listed.includes(t.taskId)) fail(`tasks/list lacks ${t.taskId}: ${listed}`);
const envs = await client.callTool({ name: "list_environments", arguments: {} });
if (!envs.structuredContent?.environments?.some((e) => e.name === "tasky")) fail(`list_environments: ${JSON.stringify(envs.structuredContent)}`);
try {
  await client.request({ method: "tools/call", params: { name: "list_environments", arguments: {}, task: {} } }, CallToolResultSchema);
  fail("list_environments was called as a task");
} catch (e) {
  if (!/cannot be called as a task/.test(e.message)) fail(`list_environments as a task: ${e.message}`);
}

console.log(`ok: build tasks over stdio: created in ${createdMs} ms, the image as its result, a waiting build cancelled (${JSON.stringify(slowResult.content?.[0]?.text ?? "").slice(0, 120)}), listed`);
await client.close();
process.exit(0);
