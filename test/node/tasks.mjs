// MCP Tasks through the official TypeScript SDK's own task API
// (client.experimental.tasks), over stdio or streamable HTTP:
//  1. the server says it serves tasks (capabilities.tasks) and execute_python
//     may be called as one (execution.taskSupport);
//  2. a Python job of TASK_SECONDS runs as a task: created at once, seen
//     working while it runs, its result (the tool's own answer, with
//     structured content) when it completes;
//  3. another is cancelled while it runs: cancelled, and cancelling it again
//     is refused (terminal);
//  4. a third is started, the client goes away, and a new connection
//     (HTTP; over stdio the same one) lists it and gets its result;
//  5. the corners: an unknown task, another tenant's (HTTP: OTHER_KEY), a
//     refused call (a task that failed, tasks/result says why), and a call
//     without a task still answers as before.
// Usage: node tasks.mjs stdio /path/to/mcp-forge --config FILE
//        KEY=... OTHER_KEY=... node tasks.mjs http http://127.0.0.1:PORT/mcp
// Environment: TASK_SECONDS (6).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, target, ...rest] = process.argv.slice(2);
const seconds = Number(process.env.TASK_SECONDS || 6);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let stdioClient;
const connect = async (key = process.env.KEY) => {
  if (mode === "stdio") {
    if (!stdioClient) {
      stdioClient = new Client({ name: "ts-sdk-tasks", version: "1.0.0" });
      await stdioClient.connect(new StdioClientTransport({ command: target, args: [...rest, "serve"], stderr: "inherit" }));
    }
    return stdioClient;
  }
  const c = new Client({ name: "ts-sdk-tasks", version: "1.0.0" });
  await c.connect(new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  return c;
};
const expectError = async (what, p, re) => {
  try {
    const r = await p;
    fail(`${what}: answered ${JSON.stringify(r)}`);
  } catch (e) {
    if (!re.test(String(e.message))) fail(`${what}: ${e.message}`);
  }
};

// 1.
let client = await connect();
const caps = client.getServerCapabilities();
if (!caps?.tasks?.requests?.tools?.call || !caps.tasks.cancel || !caps.tasks.list) fail(`capabilities: ${JSON.stringify(caps)}`);
const tools = (await client.listTools()).tools;
const py = tools.find((t) => t.name === "execute_python");
if (py?.execution?.taskSupport !== "optional") fail(`execute_python's execution: ${JSON.stringify(py?.execution)}`);
if (tools.find((t) => t.name === "list_sessions")?.execution) fail("list_sessions offered as a task");

// 2.
const code = (tag) => `import time\nfor i in range(${seconds}):\n    print('${tag}', i, flush=True)\n    time.sleep(1)\n'${tag} done'`;
const t0 = Date.now();
let created, createdMs, working = 0, result;
for await (const m of client.experimental.tasks.callToolStream({ name: "execute_python", arguments: { code: code("first") } })) {
  if (m.type === "taskCreated") { created = m.task; createdMs = Date.now() - t0; }
  if (m.type === "taskStatus" && m.task.status === "working") working++;
  if (m.type === "result") result = m.result;
  if (m.type === "error") fail(`first task: ${m.error.message}`);
}
if (!created?.taskId || createdMs > 5000) fail(`first task created ${JSON.stringify(created)} after ${createdMs} ms`);
if (working < 2) fail(`first task seen working ${working} times`);
if (result?.isError || result?.structuredContent?.result_repr !== "'first done'" || !/first 5/.test(result?.structuredContent?.stdout ?? "")) {
  fail(`first task's result: ${JSON.stringify(result)}`);
}
if (result._meta?.["io.modelcontextprotocol/related-task"]?.taskId !== created.taskId) fail(`result's related task: ${JSON.stringify(result._meta)}`);

// 3.
const start = async (c, args) => {
  // Asked for explicitly: a client that has not listed the tools does not
  // know execute_python may be a task.
  const stream = c.experimental.tasks.callToolStream({ name: "execute_python", arguments: args }, CallToolResultSchema, { task: {} });
  for await (const m of stream) {
    if (m.type === "taskCreated") { await stream.return(); return m.task; }
    if (m.type === "error") fail(`start: ${m.error.message}`);
  }
  fail("no task created");
};
const second = await start(client, { code: code("second") });
await sleep(1500);
const cancelled = await client.experimental.tasks.cancelTask(second.taskId);
if (cancelled.status !== "cancelled") fail(`cancel: ${JSON.stringify(cancelled)}`);
if ((await client.experimental.tasks.getTask(second.taskId)).status !== "cancelled") fail("the cancelled task is not cancelled");
await expectError("cancel again", client.experimental.tasks.cancelTask(second.taskId), /terminal/);

// 4.
const third = await start(client, { code: code("third") });
if (mode === "http") {
  await client.close();
  await sleep(1000);
  client = await connect();
}
const listed = (await client.experimental.tasks.listTasks()).tasks;
for (const t of [created, second, third]) {
  if (!listed.some((l) => l.taskId === t.taskId)) fail(`tasks/list lacks ${t.taskId}: ${JSON.stringify(listed)}`);
}
// tasks/result waits for the end: longer than the SDK's default 60 s when the job is.
const thirdResult = await client.experimental.tasks.getTaskResult(third.taskId, CallToolResultSchema, { timeout: (seconds + 60) * 1000 });
if (thirdResult.structuredContent?.result_repr !== "'third done'") fail(`third result: ${JSON.stringify(thirdResult)}`);

// 5.
await expectError("unknown task", client.experimental.tasks.getTask("job-0000000000000000"), /not found/i);
if (mode === "http" && process.env.OTHER_KEY) {
  const other = await connect(process.env.OTHER_KEY);
  await expectError("another tenant's task", other.experimental.tasks.getTask(third.taskId), /not found/i);
  await expectError("another tenant's result", other.experimental.tasks.getTaskResult(third.taskId, CallToolResultSchema), /not found/i);
  if ((await other.experimental.tasks.listTasks()).tasks.some((t) => t.taskId === third.taskId)) fail("another tenant lists the task");
  await other.close();
}
const refused = await start(client, { code: "1", timeout: 999999 });
const refusedTask = await client.experimental.tasks.getTask(refused.taskId);
const why = await client.experimental.tasks.getTaskResult(refused.taskId, CallToolResultSchema);
if (refusedTask.status !== "failed" || !why.isError || !/timeout/.test(JSON.stringify(why))) fail(`a refused call: ${JSON.stringify(refusedTask)} ${JSON.stringify(why)}`);
const plain = await client.callTool({ name: "execute_python", arguments: { code: "6 * 7" } });
if (plain.structuredContent?.result_repr !== "42") fail(`a call without a task: ${JSON.stringify(plain)}`);

console.log(`ok: tasks over ${mode}: created in ${createdMs} ms, seen working ${working} times, cancelled, listed, result after ${mode === "http" ? "reconnecting" : "listing"}`);
await client.close();
process.exit(0);
