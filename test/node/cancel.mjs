// Long foreground calls and cancellation through the official TypeScript
// SDK over stdio:
//  1. a stateless call longer than the client's request timeout succeeds
//     because the timeout resets on progress (resetTimeoutOnProgress), and
//     the same call without the reset times out (so the call really is
//     longer than the timeout); the gaps between progress notifications are
//     printed (min/median/max);
//  2. a session call cancelled mid-run with an AbortSignal, in Python and
//     R: variables set before survive, the interrupted loop stopped, the
//     session answers at once.
// Usage: node cancel.mjs /path/to/mcp-forge --config FILE
// Environment: CALL_SECONDS (12), CLIENT_TIMEOUT_MS (8000).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, ...rest] = process.argv.slice(2);
const callSeconds = Number(process.env.CALL_SECONDS || 12);
const timeout = Number(process.env.CLIENT_TIMEOUT_MS || 8000);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
if (callSeconds * 1000 <= timeout) fail(`CALL_SECONDS ${callSeconds} must exceed CLIENT_TIMEOUT_MS ${timeout}`);

const transport = new StdioClientTransport({ command: bin, args: [...rest, "serve"], stderr: "inherit" });
const client = new Client({ name: "ts-sdk-cancel", version: "1.0.0" });
await client.connect(transport);
const py = (args, opts) => client.callTool({ name: "execute_python", arguments: args }, undefined, opts);

// 1. The long call, its timeout reset by progress.
const long = `import time\ntime.sleep(${callSeconds})\nprint("slept")`;
const stamps = [];
const t0 = Date.now();
const res = await py({ code: long, timeout: callSeconds + 60 }, {
  timeout, resetTimeoutOnProgress: true, onprogress: () => stamps.push(Date.now()),
}).catch((e) => fail(`the long call with resetTimeoutOnProgress failed after ${Date.now() - t0} ms: ${e}`));
const took = Date.now() - t0;
if (res.isError || res.structuredContent?.stdout !== "slept\n") fail(`long call: ${JSON.stringify(res)}`);
if (took < callSeconds * 1000) fail(`the long call took ${took} ms, less than ${callSeconds} s`);
const gaps = [];
let prev = t0;
for (const s of [...stamps, Date.now()]) { gaps.push(s - prev); prev = s; }
gaps.sort((a, b) => a - b);
const median = gaps[Math.floor(gaps.length / 2)];
if (gaps[gaps.length - 1] >= timeout) fail(`a gap of ${gaps[gaps.length - 1]} ms without progress reached the client timeout`);

// The same call without the reset times out: it is longer than the timeout.
const c0 = Date.now();
let timedOut = false;
try {
  await py({ code: long, timeout: callSeconds + 60 }, { timeout, onprogress: () => {} });
} catch (e) {
  timedOut = /timed out|timeout/i.test(String(e));
  if (!timedOut) fail(`the control call failed otherwise: ${e}`);
}
if (!timedOut) fail("the control call without resetTimeoutOnProgress did not time out");
const controlMs = Date.now() - c0;

// 2. Cancel a session's loop mid-run, in Python (ipykernel's interrupt
// request) and R (IRkernel: SIGINT), reading values as stdout.
const langs = {
  python: { set: "import time\nx = 41", loop: "i = 0\nwhile True:\n    i += 1\n    time.sleep(0.01)", show: (v) => `print(${v})` },
  r: { set: "x <- 41", loop: "i <- 0\nwhile (TRUE) { i <- i + 1; Sys.sleep(0.01) }", show: (v) => `cat(${v}, "\\n")` },
};
const cancelled = {};
for (const [lang, c] of Object.entries(langs)) {
  const run = (code, opts) => client.callTool({ name: `execute_${lang}`, arguments: { code, session_id: "cancel-" + lang } }, undefined, opts);
  const num = async (v) => {
    const r = await run(c.show(v));
    if (r.isError) fail(`${lang} ${v}: ${JSON.stringify(r)}`);
    return Number(r.structuredContent?.stdout.trim());
  };
  const set = await run(c.set);
  if (set.isError) fail(`${lang} session: ${JSON.stringify(set)}`);
  const ac = new AbortController();
  const loop = run(c.loop, { signal: ac.signal, timeout: 120000 });
  setTimeout(() => ac.abort("test cancels"), 3000);
  let aborted = false;
  try {
    await loop;
  } catch (e) {
    aborted = true;
  }
  if (!aborted) fail(`${lang}: the cancelled call answered`);
  const a0 = Date.now();
  const x1 = await num("x + 1");
  const answerMs = Date.now() - a0;
  if (x1 !== 42) fail(`${lang}: x + 1 after the cancel is ${x1}: state lost`);
  // The next call waits only for the interrupted code to stop (well under a
  // second), never for the 10 s grace after which the kernel would be
  // stopped (then x would be gone, too).
  if (answerMs >= 10000) fail(`${lang}: the call after the cancel took ${answerMs} ms`);
  const n1 = await num("i");
  await new Promise((r) => setTimeout(r, 500));
  const n2 = await num("i");
  if (!(n1 > 0) || n1 !== n2) fail(`${lang}: the loop did not stop: i=${n1} then ${n2}`);
  await client.callTool({ name: "destroy_session", arguments: { session_id: "cancel-" + lang } });
  cancelled[lang] = `i=${n1},next_call_ms=${answerMs}`;
}
console.log(`ok: long=${took}ms timeout=${timeout}ms progress=${stamps.length} gaps_ms min=${gaps[0]} median=${median} max=${gaps[gaps.length - 1]} ` +
  `control_timed_out_after=${controlMs}ms cancelled python:${cancelled.python} r:${cancelled.r}`);
await client.close();
