// Background jobs through the official TypeScript SDK over stdio:
//  1. a long stateless Python job (JOB_SECONDS, printing a line every 5 s)
//     started with background: true answers at once; its resource is
//     subscribed to (notifications/resources/updated arrive) and polled
//     (state running, stdout growing), then wait_job, with a client timeout
//     shorter than the wait that progress resets, returns it done with all
//     of its output;
//  2. meanwhile, a job in a Python session and one in an R session hold
//     their sessions (a call in them is refused, naming the job), cancel_job
//     stops each with the session's state kept, and the session answers;
//  3. the job overhead: a background start's answer, and start to
//     wait_job's result, against a foreground call of the same code, same
//     run.
// Usage: node jobs.mjs /path/to/mcp-forge --config FILE
// Environment: JOB_SECONDS (60).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [bin, ...rest] = process.argv.slice(2);
const jobSeconds = Number(process.env.JOB_SECONDS || 60);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const transport = new StdioClientTransport({ command: bin, args: [...rest, "serve"], stderr: "inherit" });
const client = new Client({ name: "ts-sdk-jobs", version: "1.0.0" });
await client.connect(transport);
const call = async (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);
const readJob = async (id) => JSON.parse((await client.readResource({ uri: `mcp://forge/jobs/${id}` })).contents[0].text);

// 1. The long job.
const lines = Math.max(1, Math.floor(jobSeconds / 5));
const code = `import time\nfor i in range(${lines}):\n    print("line", i, flush=True)\n    time.sleep(5)\n"finished"`;
const t0 = Date.now();
const started = await call("execute_python", { code, background: true, timeout: jobSeconds + 120 });
const startMs = Date.now() - t0;
const id = started.structuredContent?.job_id;
if (started.isError || !id || !started.structuredContent.success) fail(`start: ${JSON.stringify(started)}`);
if (startMs > 5000) fail(`starting the job took ${startMs} ms: it waited for the code`);
let updates = 0;
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => { if (n.params.uri === `mcp://forge/jobs/${id}`) updates++; });
await client.subscribeResource({ uri: `mcp://forge/jobs/${id}` });

// 2. Session jobs, cancelled, while the long one runs.
const langs = {
  python: { set: "x = 41", loop: "import time\ny = 1\nwhile True:\n    time.sleep(0.05)", show: "print(x + 1)" },
  r: { set: "x <- 41", loop: "y <- 1\nwhile (TRUE) Sys.sleep(0.05)", show: "cat(x + 1, \"\\n\")" },
};
const cancelled = {};
for (const [lang, c] of Object.entries(langs)) {
  const sid = "job-" + lang;
  const set = await call(`execute_${lang}`, { code: c.set, session_id: sid });
  if (set.isError) fail(`${lang} session: ${JSON.stringify(set)}`);
  const j = await call(`execute_${lang}`, { code: c.loop, session_id: sid, background: true });
  const jid = j.structuredContent?.job_id;
  if (j.isError || !jid) fail(`${lang} session job: ${JSON.stringify(j)}`);
  let state;
  for (let i = 0; i < 100 && state !== "running"; i++) { state = (await readJob(jid)).state; if (state !== "running") await sleep(100); }
  if (state !== "running") fail(`${lang} session job never ran: ${state}`);
  await sleep(1000);
  const busy = await call(`execute_${lang}`, { code: c.show, session_id: sid });
  if (!busy.isError || !JSON.stringify(busy.content).includes(jid)) fail(`${lang}: a call in the job's session was not refused naming the job: ${JSON.stringify(busy)}`);
  const c0 = Date.now();
  const cj = await call("cancel_job", { job_id: jid });
  const cancelMs = Date.now() - c0;
  if (cj.structuredContent?.state !== "cancelled" || cj.isError) fail(`${lang} cancel_job: ${JSON.stringify(cj)}`);
  const after = await call(`execute_${lang}`, { code: c.show, session_id: sid });
  if (after.isError || after.structuredContent?.stdout.trim() !== "42") fail(`${lang}: the session after cancel_job: ${JSON.stringify(after)}`);
  await call("destroy_session", { session_id: sid });
  cancelled[lang] = `${cancelMs}ms`;
}

// Poll the long job while it runs: running, its output growing.
let seen = -1, polls = 0;
while (Date.now() - t0 < (jobSeconds - 5) * 1000) {
  const v = await readJob(id);
  if (v.state !== "running") fail(`poll ${polls}: the job is ${v.state} after ${Date.now() - t0} ms: ${JSON.stringify(v)}`);
  if (v.stdout_bytes < seen) fail(`poll ${polls}: stdout shrank`);
  seen = v.stdout_bytes;
  polls++;
  await sleep(Math.min(20000, jobSeconds * 250));
}
if (seen <= 0) fail("the job's output never showed while it ran");
const listed = await call("list_jobs", {});
if (!listed.structuredContent?.jobs?.some((j) => j.job_id === id)) fail(`list_jobs: ${JSON.stringify(listed)}`);

// wait_job for longer than the client's request timeout: progress resets it.
const w0 = Date.now();
let progress = 0;
const waited = await call("wait_job", { job_id: id, timeout: jobSeconds + 60 },
  { timeout: 8000, resetTimeoutOnProgress: true, onprogress: () => progress++ })
  .catch((e) => fail(`wait_job failed after ${Date.now() - w0} ms: ${e}`));
const r = waited.structuredContent;
if (waited.isError || r?.state !== "done" || r.result?.result_repr !== "'finished'") fail(`wait_job: ${JSON.stringify(waited)}`);
if (!r.result.stdout.includes(`line ${lines - 1}\n`)) fail(`the result's stdout: ${JSON.stringify(r.result.stdout)}`);
if (updates < 2) fail(`${updates} resource-updated notifications for the job`);

// 3. Start overhead: a background start against the same code in the
// foreground (both stateless, the job's answer not waited for).
const quick = "1";
const fg = [], bg = [], whole = [];
for (let i = 0; i < 10; i++) {
  let s = Date.now();
  await call("execute_python", { code: quick });
  fg.push(Date.now() - s);
  s = Date.now();
  const b = await call("execute_python", { code: quick, background: true });
  bg.push(Date.now() - s);
  const w = await call("wait_job", { job_id: b.structuredContent.job_id, timeout: 60 });
  if (w.structuredContent?.state !== "done") fail(`quick job: ${JSON.stringify(w)}`);
  whole.push(Date.now() - s);
}
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
console.log(`ok: job=${jobSeconds}s total=${Date.now() - t0}ms start=${startMs}ms polls=${polls} updates=${updates} wait_progress=${progress} ` +
  `cancel python:${cancelled.python} r:${cancelled.r} start_answer_median_ms=${med(bg)} job_to_result_median_ms=${med(whole)} foreground_median_ms=${med(fg)}`);
await client.close();
