// Hostile answers: sandbox code and client arguments chosen to push an
// answer past the 10 MiB the TypeScript SDK's stdio transport accepts, or
// to lose data silently, or to crash the server. Each attack is reported
// as one line "ATTACK name: ok|FAIL ..." and the run goes on (reconnecting
// when the connection died); the exit code is 1 if any attack failed.
// Usage: node attack-answers.mjs stdio /path/to/mcp-forge --config FILE [only,...]
//        FORGE_KEY=... node attack-answers.mjs http http://127.0.0.1:PORT/mcp
// (ATK_ONLY=name,name runs only those attacks.)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const argv = process.argv.slice(2);
const mode = argv[0];
const target = argv[1];
let rest = argv.slice(2);
let only = process.env.ATK_ONLY ? new Set(process.env.ATK_ONLY.split(",")) : null;
if (rest.length && !rest[rest.length - 1].startsWith("-") && !rest[rest.length - 1].includes("/")) {
  only = new Set(rest[rest.length - 1].split(","));
  rest = rest.slice(0, -1);
}
const LIMIT = 10 * 1024 * 1024;

let client, closed, largest, lastErr;
async function connect() {
  const transport = mode === "stdio"
    ? new StdioClientTransport({ command: target, args: [...rest, "serve"], stderr: process.env.ATK_STDERR ? "inherit" : "pipe" })
    : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${process.env.FORGE_KEY}` } } });
  client = new Client({ name: "ts-sdk-attack-answers", version: "1.0.0" });
  closed = false; lastErr = null;
  client.onclose = () => { closed = true; };
  client.onerror = (e) => { lastErr = e?.message ?? String(e); };
  await client.connect(transport);
  if (mode === "stdio") transport.stderr?.on("data", () => {});
  // Every message as the client parsed it, re-encoded: within a few bytes
  // of the wire (Go writes "<" as \u003c in content, so this is a floor).
  const orig = transport.onmessage;
  transport.onmessage = (m, extra) => {
    largest = Math.max(largest, Buffer.byteLength(JSON.stringify(m)));
    orig?.(m, extra);
  };
}
const text = (res) => (res?.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
const call = (name, args, opts = {}) => client.callTool({ name, arguments: args }, undefined, { timeout: 300_000, ...opts });
const py = (code, extra = {}, opts) => call("execute_python", { code, ...extra }, opts);

const results = [];
async function attack(name, fn) {
  if (only && !only.has(name)) return;
  largest = 0;
  const t0 = Date.now();
  let verdict;
  try {
    if (closed) await connect();
    verdict = await fn();
  } catch (e) {
    verdict = `FAIL exception: ${(e?.message ?? String(e)).slice(0, 400)}`;
  }
  if (closed) verdict = `FAIL connection closed (${lastErr ?? "no error"}); ${verdict ?? ""}`;
  if (largest > LIMIT) verdict = `FAIL a message of ${largest} bytes; ${verdict ?? ""}`;
  verdict ??= "ok";
  const line = `ATTACK ${name}: ${verdict} [largest ${largest} B, ${Date.now() - t0} ms]`;
  console.log(line);
  results.push(line);
}

await connect();
const S = "atk";
const sess = { session_id: S };
await py("x = 1", sess);

// 1. A huge final-expression repr of control bytes: each escapes to six.
await attack("huge-repr-control", async () => {
  const res = await py("'\\x01' * 3_000_000", sess);
  const o = res.structuredContent;
  if (res.isError) return `FAIL the run succeeded but the answer is an error: ${text(res).slice(0, 300)}`;
  return `ok result_repr ${o?.result_repr?.length} chars`;
});

// 2. An exception whose message is 5 MB of control bytes.
await attack("huge-error-message", async () => {
  const res = await py("print('before'); raise ValueError('\\x01' * 5_000_000)", sess);
  const o = res.structuredContent;
  if (!o || !o.error) return `FAIL no structured error (isError ${res.isError}): ${text(res).slice(0, 300)}`;
  if (!/before/.test(o.stdout + text(res))) return "FAIL the stdout before the error was lost";
  return `ok error.message ${o.error.message.length} chars`;
});

// 3. Rich output: a big text/html display.
await attack("huge-html-display", async () => {
  const res = await py("from IPython.display import HTML, display\ndisplay(HTML('<td>&</td>' * 400_000))\nprint('after')", sess);
  if (res.isError) return `FAIL: ${text(res).slice(0, 300)}`;
  return "ok";
});

// 4. The session's history and notebook after those cells.
await attack("history-after-big-cells", async () => {
  const r = await client.readResource({ uri: `mcp://forge/sessions/${S}/history` });
  return `ok ${r.contents[0].text.length} chars`;
});
await attack("notebook-resource-after-big-cells", async () => {
  const r = await client.readResource({ uri: `mcp://forge/sessions/${S}/notebook` });
  return `ok ${r.contents[0].text.length} chars`;
});
await attack("export-notebook-after-big-cells", async () => {
  const res = await call("export_notebook", sess);
  if (res.isError) return `FAIL: ${text(res).slice(0, 400)}`;
  return `ok ${res.structuredContent?.size} bytes`;
});

// 5. Many inline output files just under inline_file_size, of control bytes.
await attack("many-inline-output-files", async () => {
  const res = await py("import os\nos.makedirs('output', exist_ok=True)\nfor i in range(60):\n    open(f'output/f{i}.txt', 'w').write('\\x01' * (250 << 10))\n", sess);
  if (res.isError) return `FAIL: ${text(res).slice(0, 300)}`;
  const files = res.structuredContent?.files ?? [];
  return `ok ${files.length} files, ${res.content.length} content blocks`;
});

// 6. Many figures.
await attack("many-figures", async () => {
  const res = await py("import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt, numpy as np\nfor i in range(12):\n    f = plt.figure(figsize=(12, 12), dpi=100); plt.imshow(np.random.rand(600, 600))\n", {});
  if (res.isError) return `FAIL: ${text(res).slice(0, 300)}`;
  return `ok ${res.content.filter((c) => c.type === "image").length} images`;
});

// 7. stderr-only flood of control bytes, and progress while printing fast.
await attack("stderr-flood-with-progress", async () => {
  let n = 0, maxMsg = 0;
  const res = await py("import sys\nfor i in range(30000):\n    sys.stderr.write('\\x07' * 300 + '\\n')\n", sess,
    { onprogress: (p) => { n++; maxMsg = Math.max(maxMsg, (p.message ?? "").length); }, resetTimeoutOnProgress: true });
  if (res.isError) return `FAIL: ${text(res).slice(0, 300)}`;
  return `ok ${n} progress notifications, longest ${maxMsg} chars`;
});

// 8. A background job with big output: wait_job and the job resource.
await attack("background-job-big-output", async () => {
  const start = await py("import sys\nfor i in range(4000):\n    print('\\\\' * 1000)\n    sys.stderr.write('\"' * 1000 + '\\n')\nraise RuntimeError('\\x02' * 3_000_000)", { ...sess, background: true });
  const id = start.structuredContent?.job_id;
  if (!id) return `FAIL no job: ${text(start).slice(0, 300)}`;
  const w = await call("wait_job", { job_id: id, timeout: 120 });
  const r = await client.readResource({ uri: `mcp://forge/jobs/${id}` });
  if (w.isError && !w.structuredContent) return `FAIL wait_job: ${text(w).slice(0, 300)}`;
  return `ok job resource ${r.contents[0].text.length} chars`;
});

// 9. The variables resource with huge previews.
await attack("variables-huge-previews", async () => {
  await py("big = {i: '\\x01' * 100000 for i in range(100)}\nfor i in range(200):\n    globals()[f'v{i}'] = '<' * 200000", sess);
  const r = await client.readResource({ uri: `mcp://forge/sessions/${S}/variables` });
  return `ok ${r.contents[0].text.length} chars`;
});

// 10. download_file offsets at and past the edges.
await attack("offset-edges", async () => {
  await py("open('e.bin','wb').write(b'')\nopen('s.bin','wb').write(bytes(range(256))*40)", sess);
  const out = [];
  for (const [path, off] of [["e.bin", 0], ["s.bin", -1], ["s.bin", 10240], ["s.bin", 10239], ["s.bin", 2 ** 53], ["s.bin", 9223372036854775807], ["s.bin", 1.5]]) {
    try {
      const res = await call("download_file", { ...sess, path, offset: off });
      out.push(`${path}@${off}: ${res.isError ? "refused" : `len ${res.structuredContent?.length} next ${res.structuredContent?.next_offset}`}`);
    } catch (e) { out.push(`${path}@${off}: rpc error ${e.message.slice(0, 80)}`); }
  }
  return `ok ${out.join("; ")}`;
});

// 11. Part URIs for links, directories, and absurd part numbers.
await attack("part-uris-odd", async () => {
  await py("import os\nos.makedirs('d', exist_ok=True)\nopen('d/t.txt','w').write('hi')\nif not os.path.lexists('lnk'): os.symlink('d/t.txt', 'lnk')", sess);
  const out = [];
  for (const u of ["parts/0/lnk", "parts/0/d", "parts/1/d/t.txt", "parts/00/d/t.txt", "parts/8796093022208/d/t.txt"]) {
    try {
      const r = await client.readResource({ uri: `mcp://forge/sessions/${S}/${u}` });
      out.push(`${u}: read ${JSON.stringify(r.contents[0].text ?? r.contents[0].blob).slice(0, 20)}`);
    } catch (e) { out.push(`${u}: ${e.message.slice(0, 60)}`); }
  }
  const bogus = out.find((l) => l.startsWith("parts/8796093022208") && l.includes("read"));
  return bogus ? `FAIL part 8796093022208 of a 2-byte file was served: ${out.join("; ")}` : `ok ${out.join("; ")}`;
});

// 12. Part number whose product with the part size overflows negative.
await attack("part-uri-overflow-panic", async () => {
  try {
    await client.readResource({ uri: `mcp://forge/sessions/${S}/parts/4398046511104/d/t.txt` });
  } catch (e) {
    if (closed) return `FAIL the server died: ${e.message.slice(0, 200)}`;
    try { await client.ping(); } catch (e2) { return `FAIL the server died: ${e.message.slice(0, 100)}; then ${e2.message.slice(0, 100)}`; }
    return `ok refused: ${e.message.slice(0, 100)}`;
  }
  return "FAIL served";
});

// 14. A repr that returns raw control bytes (Python's str repr escapes them).
await attack("repr-raw-control", async () => {
  const res = await py("class R:\n    def __repr__(self): return '\\x01' * 1_000_000\nprint('before')\nR()", sess);
  if (res.isError) return `FAIL the run succeeded but the answer is an error: ${text(res).slice(0, 300)}`;
  return `ok result_repr ${res.structuredContent?.result_repr?.length} chars`;
});

// 15. Rich displays of HTML and Markdown, each under max_output raw, six
// times that escaped.
await attack("rich-html-markdown", async () => {
  const res = await py("from IPython.display import HTML, Markdown, display\nprint('before')\ndisplay(HTML('<' * 1_000_000))\ndisplay(Markdown('&' * 1_000_000))", sess);
  if (res.isError) return `FAIL the run succeeded but the answer is an error: ${text(res).slice(0, 300)}`;
  return `ok rich ${Object.keys(res.structuredContent?.rich ?? {}).join(",")}`;
});

// 16. A stateless run whose exception message is 2 MB of control bytes.
await attack("stateless-huge-error", async () => {
  const res = await py("print('before')\nraise ValueError('\\x01' * 2_000_000)");
  const o = res.structuredContent;
  if (!o?.error) return `FAIL no structured error: ${text(res).slice(0, 300)}`;
  return `ok error.message ${o.error.message.length}`;
});

// 17. R: control bytes on stdout, and an error of them.
await attack("r-control-bytes", async () => {
  const res = await call("execute_r", { session_id: "atkr", code: 'cat(strrep("\\001", 2e6))\nmessage(strrep("\\002", 2e6))\nstop(strrep("\\003", 3e6))' });
  const o = res.structuredContent;
  if (!o?.error) return `FAIL no structured error (isError ${res.isError}): ${text(res).slice(0, 300)}`;
  return `ok stdout ${o.stdout?.length} in_text ${o.output_in_text} error ${o.error.message.length}`;
});

// 18. A background job that fails with a big error: wait_job's answer.
await attack("job-error-wait", async () => {
  const start = await py("print('before')\nraise RuntimeError('\\x02' * 3_000_000)", { session_id: "atkj", background: true });
  const id = start.structuredContent?.job_id;
  if (!id) return `FAIL no job: ${text(start).slice(0, 300)}`;
  const w = await call("wait_job", { job_id: id, timeout: 120 });
  const r = w.structuredContent?.result;
  if (!r?.error) return `FAIL wait_job lost the job's result (isError ${w.isError}): ${text(w).slice(0, 300)}`;
  return `ok`;
});

// 19. A job with large escaped output but no error: its resource.
await attack("job-resource-escaped-output", async () => {
  const start = await py("import sys\nfor i in range(600):\n    print('\\\\' * 1000)\n    sys.stderr.write('\"' * 1000 + '\\n')", { session_id: "atkj2", background: true });
  const id = start.structuredContent?.job_id;
  await call("wait_job", { job_id: id, timeout: 120 });
  const r = await client.readResource({ uri: `mcp://forge/jobs/${id}` });
  return `ok job resource ${r.contents[0].text.length} chars`;
});

// 13. The connection is still alive.
await attack("alive", async () => {
  const res = await py("6 * 7", sess);
  return res.structuredContent?.result === "42" ? "ok" : `FAIL ${text(res).slice(0, 200)}`;
});

await client.close().catch(() => {});
const failed = results.filter((l) => / FAIL/.test(l));
console.log(`done: ${results.length} attacks, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
