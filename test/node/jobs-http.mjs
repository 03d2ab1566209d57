// Background jobs over streamable HTTP through the official TypeScript SDK,
// with two tenants (keys ALICE_KEY, BOB_KEY; alice's max_concurrent_runs is 1):
//  1. alice starts a job and disconnects; it goes on, and a new connection
//     of alice's finds it (list_jobs) and waits for it: done, with all of
//     its output (subscribing is refused over stateless HTTP, saying so);
//  2. bob sees none of it: wait_job, cancel_job and resources/read of
//     alice's job answer as for a job nobody has;
//  3. a running job holds alice's run slot: another execute of hers is
//     refused by the quota, a job or not, until it ends.
// Usage: ALICE_KEY=... BOB_KEY=... node jobs-http.mjs http://127.0.0.1:PORT/mcp
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const url = new URL(process.argv[2]);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const connect = async (key) => {
  const c = new Client({ name: "ts-sdk-jobs-http", version: "1.0.0" });
  await c.connect(new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
  return c;
};
const call = (c, name, args, opts) => c.callTool({ name, arguments: args }, undefined, opts);

// 1. Start, disconnect, come back.
let alice = await connect(process.env.ALICE_KEY);
const code = "import time\nfor i in range(4):\n    print('tick', i, flush=True)\n    time.sleep(3)\n'done'";
const started = await call(alice, "execute_python", { code, background: true });
const id = started.structuredContent?.job_id;
if (started.isError || !id) fail(`start: ${JSON.stringify(started)}`);
await alice.close(); // no DELETE of the MCP session: the connection just goes
await sleep(2000);

// 2. Bob.
const bob = await connect(process.env.BOB_KEY);
for (const [tool, args] of [["wait_job", { job_id: id, timeout: 1 }], ["cancel_job", { job_id: id }]]) {
  const r = await call(bob, tool, args);
  if (!r.isError || !/no job/.test(r.structuredContent?.error?.message ?? "")) fail(`bob ${tool}: ${JSON.stringify(r)}`);
}
let read;
try { read = await bob.readResource({ uri: `mcp://forge/jobs/${id}` }); } catch (e) { read = e; }
if (!(read instanceof Error)) fail(`bob read alice's job: ${JSON.stringify(read)}`);
const bobs = await call(bob, "list_jobs", {});
if (bobs.structuredContent?.jobs?.length !== 0) fail(`bob's list_jobs: ${JSON.stringify(bobs)}`);

// 3. The quota, while the job runs.
alice = await connect(process.env.ALICE_KEY);
const listed = await call(alice, "list_jobs", {});
const mine = listed.structuredContent?.jobs?.find((j) => j.job_id === id);
if (!mine || mine.state !== "running") fail(`alice's list_jobs after reconnecting: ${JSON.stringify(listed)}`);
for (const args of [{ code: "1" }, { code: "1", background: true }]) {
  const q = await call(alice, "execute_python", args);
  if (!q.isError || q.structuredContent?.error?.type !== "QuotaExceeded") fail(`a second run of alice's (${JSON.stringify(args)}): ${JSON.stringify(q)}`);
}
// Stateless HTTP has no connection to carry notifications: subscribing
// is refused, saying what to do instead.
let sub;
try { sub = await alice.subscribeResource({ uri: `mcp://forge/jobs/${id}` }); } catch (e) { sub = e; }
if (!(sub instanceof Error) || !/wait_job/.test(String(sub))) fail(`resources/subscribe over HTTP: ${sub}`);
const w = await call(alice, "wait_job", { job_id: id, timeout: 60 });
const r = w.structuredContent;
if (w.isError || r?.state !== "done" || r.result?.stdout !== "tick 0\ntick 1\ntick 2\ntick 3\n") fail(`wait_job: ${JSON.stringify(w)}`);
// The slot is given back once the job's sandbox is gone, just after its end.
let after;
for (let i = 0; i < 50; i++) {
  after = await call(alice, "execute_python", { code: "1" });
  if (after.structuredContent?.error?.type !== "QuotaExceeded") break;
  await sleep(200);
}
if (after.isError) fail(`alice's run after the job: ${JSON.stringify(after)}`);
console.log(`ok: job=${id} elapsed_s=${r.elapsed_s.toFixed(1)}`);
await alice.close();
await bob.close();
