// The session view (an MCP App, ui://forge/session) in a real browser:
// headless Chromium loads it in a sandboxed iframe of a minimal host page,
// and the host's side of the Apps bridge is the extension's own AppBridge
// (@modelcontextprotocol/ext-apps), run here in Node: the page relays the
// postMessage traffic between the iframe and it. AppBridge checks every
// message of the view against the extension's schemas, sends the tool's
// input and result, and passes the view's resources/read and tools/call
// on to a live mcp-forge over the TypeScript SDK. It checks:
//  1. tools/list names the view on the execute and session tools only,
//     and the view is a text/html;profile=mcp-app resource;
//  2. after an execute that makes a DataFrame and a plot, the view shows
//     the DataFrame's columns among the variables and the plot as an image;
//  3. axe-core finds no serious or critical accessibility violation;
//  4. hostile values (a variable and an output holding markup) show as
//     text: no element is created from them and no script runs;
//  5. another execute, made by the client and not through the view,
//     appears in it without the host telling it (the view polls);
//  6. a stateless run's answer is shown alone.
// Screenshots go to $ARTIFACTS (default: a new directory under /tmp).
// Usage: node session-view.mjs /path/to/mcp-forge --config FILE
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { AppBridge } from "@modelcontextprotocol/ext-apps/app-bridge";
import { chromium } from "playwright-core";
import { mkdirSync, mkdtempSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const [bin, ...rest] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };
const out = process.env.ARTIFACTS || mkdtempSync("/tmp/forge-session-view-");
mkdirSync(out, { recursive: true });
const VIEW = "ui://forge/session";

// The host page: an iframe without same-origin (as hosts sandbox MCP Apps)
// and a relay of its messages to and from the AppBridge in Node.
const HOST = `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>test host</title></head><body>
<iframe id="view" title="MCP-Forge session view" sandbox="allow-scripts" style="width:1080px;height:1460px;border:0"></iframe>
<script>
const frame = document.getElementById("view");
window.addEventListener("message", (ev) => {
  if (ev.source !== frame.contentWindow) return;
  if (ev.data && ev.data.pwned) { window.pwned = ev.data; return; }
  window.fromView(JSON.stringify(ev.data));
});
window.toView = (msg) => frame.contentWindow.postMessage(msg, "*");
window.load = (html) => { frame.srcdoc = html; };
</script></body></html>`;

const SESSION = "view-demo";

const client = new Client({ name: "apps-host-harness", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: bin, args: [...rest, "serve"], stderr: "inherit" }));

// 1.
const tools = (await client.listTools()).tools;
const named = tools.filter((t) => t._meta?.ui?.resourceUri === VIEW).map((t) => t.name).sort();
for (const want of ["execute_python", "fork_session", "restart_session", "document_state", "restore_session"]) {
  if (!named.includes(want)) fail(`${want} does not name the view: ${named}`);
}
for (const not of ["list_sessions", "download_file", "destroy_session", "wait_job"]) {
  if (named.includes(not)) fail(`${not} names the view`);
}
const listed = (await client.listResources()).resources.find((r) => r.uri === VIEW);
if (listed?.mimeType !== "text/html;profile=mcp-app") fail(`resources/list: ${JSON.stringify(listed)}`);
const read = await client.readResource({ uri: VIEW });
const html = read.contents[0]?.text;
if (read.contents[0]?.mimeType !== "text/html;profile=mcp-app" || !html?.includes("<html")) fail(`resources/read ${VIEW}: ${JSON.stringify(read).slice(0, 300)}`);
if (!read.contents[0]._meta?.ui?.csp) fail("the view's contents carry no _meta.ui.csp");

// 2. The session, through the client (as the model's call would be).
const hostile = `<img src=x onerror="window.parent.postMessage({pwned: 1}, '*')">`;
const code1 = [
  "import pandas as pd",
  "import matplotlib.pyplot as plt",
  "df = pd.DataFrame({'city': ['Lyon', 'Graz', 'Turku'], 'population': [522250, 291072, 201863]})",
  `evil = ${JSON.stringify(hostile)}`,
  "plt.bar(df['city'], df['population'])",
  "plt.title('population')",
  "plt.show()",
  `print(${JSON.stringify("<script>window.parent.postMessage({pwned: 2}, '*')</script>")})`,
  "df.shape",
].join("\n");
const input1 = { code: code1, session_id: SESSION };
const res1 = await client.callTool({ name: "execute_python", arguments: input1 });
if (res1.isError) fail(`execute: ${JSON.stringify(res1).slice(0, 600)}`);
if (!res1.content.some((c) => c.type === "image")) fail("the execute made no image");

const reads = {};
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 1500 } });
  const pageErrors = [];
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") pageErrors.push(m.text()); });
  // One AppBridge per view opened, as a host makes one per rendered app.
  let transport = null;
  await page.exposeFunction("fromView", (text) => transport?.onmessage?.(JSON.parse(text)));
  await page.setContent(HOST);
  const forward = (method, call) => async (params) => {
    const key = method === "resources/read" ? params.uri.replace(/^mcp:\/\/forge\/sessions\/[^/]+\//, "") : `${method} ${params.name}`;
    reads[key] = (reads[key] || 0) + 1;
    return call(params);
  };
  const open = async (input, result) => {
    await transport?.close();
    const bridge = new AppBridge(null, { name: "forge-test-host", version: "1.0.0" }, { serverResources: {}, serverTools: {} },
      { hostContext: { theme: "light", displayMode: "inline" } });
    bridge.onreadresource = forward("resources/read", (p) => client.readResource(p));
    bridge.oncalltool = forward("tools/call", (p) => client.callTool(p));
    const ready = new Promise((resolve) => { bridge.oninitialized = resolve; });
    transport = {
      start: async () => {},
      send: async (msg) => { await page.evaluate((m) => window.toView(m), msg); },
      close: async () => { transport = null; },
    };
    await bridge.connect(transport);
    await page.evaluate((h) => window.load(h), html);
    await ready;
    await bridge.sendToolInput({ arguments: input });
    await bridge.sendToolResult(result);
    const handle = await page.waitForSelector("iframe#view");
    return handle.contentFrame();
  };
  const frame = await open(input1, res1);

  await frame.waitForSelector('#variables-table tr[data-name="df"]', { timeout: 30000 });
  const dfRow = await frame.textContent('#variables-table tr[data-name="df"]');
  for (const col of ["city (object)", "population (int64)", "DataFrame", "3 × 2"]) {
    if (!dfRow.includes(col)) fail(`the DataFrame's row lacks ${col}: ${dfRow}`);
  }
  await frame.waitForFunction(() => [...document.querySelectorAll("#cells img.figure")].some((i) => i.complete && i.naturalWidth > 100), null, { timeout: 15000 });
  const title = await frame.textContent("#title");
  if (!title.includes(SESSION)) fail(`title: ${title}`);
  await page.screenshot({ path: join(out, "session-view-1.png"), fullPage: true });

  // 3.
  const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  await frame.evaluate(axeSource);
  const axe = await frame.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  if (axe.passes.length < 10) fail(`axe checked almost nothing (${axe.passes.length} rules passed): did it run in the view?`);
  const serious = axe.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (serious.length) fail(`accessibility: ${JSON.stringify(serious.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => n.target) })))}`);

  // 4.
  const evilRow = await frame.textContent('#variables-table tr[data-name="evil"]');
  if (!evilRow.includes("onerror")) fail(`the hostile variable is not shown as text: ${evilRow}`);
  const injected = await frame.evaluate(() => document.querySelectorAll('img[src="x"], #cells script, #variables script').length);
  if (injected) fail(`${injected} element(s) made from the session's values`);
  const stdout = await frame.textContent("#cells pre.stdout");
  if (!stdout.includes("<script>")) fail(`stdout not shown as text: ${stdout}`);

  // 5. A second cell, run by the client alone.
  const res2 = await client.callTool({ name: "execute_python", arguments: { session_id: SESSION, code: "df2 = df.assign(density=1.5)\nprint('second cell ran')" } });
  if (res2.isError) fail(`second execute: ${JSON.stringify(res2).slice(0, 400)}`);
  await frame.waitForSelector('#variables-table tr[data-name="df2"]', { timeout: 20000 });
  await frame.waitForFunction(() => document.querySelector("#cells article")?.textContent.includes("second cell ran"), null, { timeout: 10000 });
  const df2Row = await frame.textContent('#variables-table tr[data-name="df2"]');
  if (!df2Row.includes("density")) fail(`df2's row: ${df2Row}`);
  await page.screenshot({ path: join(out, "session-view-2.png"), fullPage: true });

  // 6.
  const input3 = { code: "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nplt.show()\nprint('stateless ran')" };
  const res3 = await client.callTool({ name: "execute_python", arguments: input3 });
  if (res3.isError) fail(`stateless execute: ${JSON.stringify(res3).slice(0, 400)}`);
  const frame3 = await open(input3, res3);
  await frame3.waitForFunction(() => document.querySelector("#title")?.textContent === "A stateless run", null, { timeout: 10000 });
  if (!(await frame3.textContent("#cells")).includes("stateless ran")) fail("the stateless run's output is not shown");
  await frame3.waitForFunction(() => [...document.querySelectorAll("#cells img.figure")].some((i) => i.complete && i.naturalWidth > 100), null, { timeout: 10000 });
  await page.screenshot({ path: join(out, "session-view-stateless.png"), fullPage: true });

  const pwned = await page.evaluate(() => window.pwned);
  if (pwned) fail(`a hostile value ran script: ${JSON.stringify(pwned)}`);
  if (pageErrors.length) fail(`errors in the page: ${pageErrors.join("; ")}`);
  console.log(`ok: session view rendered in Chromium ${browser.version()}: variables, plot, a second cell seen by polling, a stateless run; ` +
    `axe: ${axe.violations.length} violation(s), none serious; reads through the host: ${JSON.stringify(reads)}; screenshots in ${out}`);
} finally {
  await browser.close();
  await client.close();
}
