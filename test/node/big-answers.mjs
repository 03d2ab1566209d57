// Answers near and past what the TypeScript SDK accepts: its stdio
// transport drops the connection on a message over 10 MiB (and the stdio
// server then exits). Files at 8, 9.9 and 10 MiB come back whole, in parts,
// byte for byte; outputs of control bytes, NULs, invalid UTF-8 and long
// lines come back cut, each answer under the bound, the connection alive.
// Usage: node big-answers.mjs stdio /path/to/mcp-forge --config FILE
//        FORGE_KEY=... node big-answers.mjs http http://127.0.0.1:PORT/mcp
import { createHash } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, ...rest] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: target, args: [...rest, "serve"], stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${process.env.FORGE_KEY}` } } });
const client = new Client({ name: "ts-sdk-big-answers", version: "1.0.0" });
let closed = false;
client.onclose = () => { closed = true; };
client.onerror = (e) => console.error("client error:", e?.message ?? e);
await client.connect(transport);

// Every answer is measured as the client got it: the SDK parses it, so
// re-encoding gives its size within the JSON-RPC envelope's few bytes.
const LIMIT = 10 * 1024 * 1024;
let largest = 0;
const call = async (name, args) => {
  const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 });
  largest = Math.max(largest, JSON.stringify(res).length);
  if (closed) fail(`the connection closed during ${name}`);
  return res;
};
const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");

const S = "big";
const made = await call("execute_python", { session_id: S, code: `
import hashlib, json, os
sizes = {"f8": 8 * 2**20, "f99": int(9.9 * 2**20), "f10": 10 * 2**20}
os.makedirs("data", exist_ok=True)
sums = {}
for name, n in sizes.items():
    data = os.urandom(n)
    open("data/" + name, "wb").write(data)
    sums[name] = hashlib.sha256(data).hexdigest()
ctl = b"\\x01" * (9 * 2**20)
open("data/ctl.txt", "wb").write(ctl)
sums["ctl.txt"] = hashlib.sha256(ctl).hexdigest()
print(json.dumps(sums))` });
if (made.isError) fail(`writing the files: ${text(made)}`);
const sums = JSON.parse(made.structuredContent.stdout);

for (const name of ["f8", "f99", "f10", "ctl.txt"]) {
  const chunks = [];
  let offset = 0, parts = 0, sha;
  for (;;) {
    const res = await call("download_file", { session_id: S, path: `data/${name}`, offset });
    if (res.isError) fail(`download_file ${name} at ${offset}: ${text(res)}`);
    const out = res.structuredContent;
    if (out.offset !== undefined && out.offset !== offset && !(offset === 0 && !out.offset)) fail(`${name}: offset ${out.offset}, asked ${offset}`);
    chunks.push(out.encoding === "base64" ? Buffer.from(out.content, "base64") : Buffer.from(out.content, "utf8"));
    sha = out.sha256;
    parts++;
    if (!out.next_offset) break;
    if (out.next_offset <= offset) fail(`${name}: next_offset ${out.next_offset} after ${offset}`);
    offset = out.next_offset;
  }
  const whole = Buffer.concat(chunks);
  const got = createHash("sha256").update(whole).digest("hex");
  if (got !== sums[name] || sha !== sums[name]) fail(`${name}: ${whole.length} bytes in ${parts} part(s), sha256 ${got}, the server said ${sha}, the code ${sums[name]}`);
  if (parts < 2) fail(`${name}: one part for ${whole.length} bytes`);

  // The same bytes as resources: the whole file's URI says to read parts.
  let err;
  try { await client.readResource({ uri: `mcp://forge/sessions/${S}/files/data/${name}` }); } catch (e) { err = e; }
  if (!err || !/parts/.test(err.message)) fail(`resources/read of the whole ${name}: ${err?.message ?? "no error"}`);
  const res = [];
  for (let i = 0; ; i++) {
    let r;
    try { r = await client.readResource({ uri: `mcp://forge/sessions/${S}/parts/${i}/data/${name}` }); } catch (e) {
      if (/does not exist/.test(e.message) && i > 0) break;
      fail(`part ${i} of ${name}: ${e.message}`);
    }
    largest = Math.max(largest, JSON.stringify(r).length);
    const c = r.contents[0];
    res.push(c.blob !== undefined ? Buffer.from(c.blob, "base64") : Buffer.from(c.text, "utf8"));
  }
  const rsum = createHash("sha256").update(Buffer.concat(res)).digest("hex");
  if (rsum !== sums[name]) fail(`${name} read as ${res.length} resource parts: sha256 ${rsum}`);
  console.log(`${name}: ${whole.length} bytes in ${parts} download_file part(s) and ${res.length} resource part(s)`);
}

const past = await call("download_file", { session_id: S, path: "data/f8", offset: 8 * 2 ** 20 });
if (!past.isError || !/outside/.test(text(past))) fail(`an offset past the end: ${text(past)}`);

// Outputs that escape to many times their size, in a session and stateless.
const outputs = {
  control: `for _ in range(3000): print('\\x01' * 1000)`,
  nul: `import sys; sys.stdout.write('\\x00' * 2_000_000)`,
  invalid: `import os, time; os.write(1, b"\\xffa" * 2_000_000); time.sleep(0.5)`,
  longline: `print('y' * 3_000_000)`,
  html: `print('<&>' * 1_000_000)`,
  both: `import sys\nfor _ in range(2000): print('\\x1b[31m' * 100); print('\\x07' * 600, file=sys.stderr)`,
};
for (const [name, code] of Object.entries(outputs)) {
  for (const args of [{ code, session_id: S }, { code }]) {
    const res = await call("execute_python", args);
    const out = res.structuredContent;
    if (res.isError || !out?.success) fail(`${name}: ${text(res).slice(0, 500)}`);
    if (!out.truncated) fail(`${name}: not marked truncated (${out.stdout_bytes} bytes)`);
    if (!out.output_in_text || out.stdout !== "" ) fail(`${name}: the large output went twice (output_in_text ${out.output_in_text})`);
    if (!/cut at/.test(text(res))) fail(`${name}: the text does not say the output was cut`);
  }
}
const alive = await call("execute_python", { code: "6 * 7", session_id: S });
if (alive.structuredContent?.result !== "42") fail(`after the big answers: ${JSON.stringify(alive)}`);
if (largest > LIMIT) fail(`an answer of ${largest} bytes reached the client`);
console.log(`ok: largest answer ${largest} bytes (limit ${LIMIT}), connection alive`);
await client.close();
