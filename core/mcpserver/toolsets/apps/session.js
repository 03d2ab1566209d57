"use strict";
// The session view: an MCP App (SEP-1865) in the host's sandboxed iframe.
// It talks JSON-RPC over postMessage to the host only, which proxies its
// resources/read and tools/call to MCP-Forge with the user's connection:
// the view holds no credentials and can reach nothing else (the page's
// CSP allows no connection at all). Everything the session holds is
// written with textContent, never parsed as HTML: variable previews,
// outputs and file names are the sandboxed code's to choose.
(() => {
  const PROTOCOL = "2026-01-26";
  // The session's state is looked at every POLL_MS while the view is on
  // screen, less often (up to POLL_MAX_MS) while nothing changes, and no
  // more after IDLE_STOP_MS without a change (Refresh looks again).
  const POLL_MS = 3000;
  const POLL_MAX_MS = 30000;
  const IDLE_STOP_MS = 30 * 60 * 1000;
  const CELLS = 5; // the last cells shown
  const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml"]);
  const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

  let nextId = 1;
  const pending = new Map();
  let hostCaps = {};
  let sessionId = "";
  let args = null;
  let lastStamp = "";
  let poller = 0;
  let pollEvery = POLL_MS;
  let lastChange = Date.now();
  let onScreen = true;
  let loading = false;
  const own = (o, k) => o && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...children) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined && c !== "") e.append(c);
    return e;
  };
  const clear = (node, ...children) => node.replaceChildren(...children);
  const status = (text) => { $("status").textContent = text; };

  // The bridge.
  const send = (msg) => window.parent.postMessage(msg, "*");
  const request = (method, params) => new Promise((resolve, reject) => {
    const id = nextId++;
    const timer = setTimeout(() => {
      if (pending.delete(id)) reject(new Error(method + ": the host did not answer in 30 s"));
    }, 30000);
    pending.set(id, { resolve, reject, timer });
    send({ jsonrpc: "2.0", id, method, params });
  });
  const notify = (method, params) => send({ jsonrpc: "2.0", method, params });

  window.addEventListener("message", (ev) => {
    if (ev.source !== window.parent) return;
    const m = ev.data;
    if (!m || typeof m !== "object" || m.jsonrpc !== "2.0") return;
    if (m.method === undefined && m.id !== undefined) {
      const p = pending.get(m.id);
      if (!p) return;
      pending.delete(m.id);
      clearTimeout(p.timer);
      if (m.error) p.reject(new Error(String(m.error.message || "error " + m.error.code)));
      else p.resolve(m.result);
      return;
    }
    if (typeof m.method !== "string") return;
    if (m.id !== undefined) { // a request of the host's
      if (m.method === "ui/resource-teardown") stopPolling();
      if (m.method === "ui/resource-teardown" || m.method === "ping") send({ jsonrpc: "2.0", id: m.id, result: {} });
      else send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: m.method + " is not served by this view" } });
      return;
    }
    const params = m.params || {};
    switch (m.method) {
      case "ui/notifications/tool-input":
        args = params.arguments || {};
        if (!sessionId && typeof args.session_id === "string") show(args.session_id);
        break;
      case "ui/notifications/tool-result":
        toolResult(params);
        break;
      case "ui/notifications/host-context-changed":
        theme(params.theme);
        break;
    }
  });

  const theme = (t) => {
    document.documentElement.classList.toggle("dark", t === "dark");
    document.documentElement.classList.toggle("light", t === "light");
  };

  // The answer of the tool the view was opened for: a session's id
  // (fork_session names the new one), or a stateless run shown alone.
  const toolResult = (res) => {
    const sc = res.structuredContent || {};
    const id = typeof sc.session_id === "string" && sc.session_id ? sc.session_id :
      (args && typeof args.session_id === "string" ? args.session_id : "");
    if (id) {
      show(id, true);
      return;
    }
    if (!sessionId) statelessRun(res);
  };

  const show = (id, force) => {
    if (id !== sessionId) lastStamp = "";
    sessionId = id;
    $("title").textContent = "Session " + id;
    document.title = "MCP-Forge session " + id;
    $("refresh").disabled = false;
    if (force) lastStamp = "";
    load();
    startPolling();
  };

  const startPolling = () => {
    pollEvery = POLL_MS;
    lastChange = Date.now();
    stopPolling();
    const tick = async () => {
      if (onScreen && document.visibilityState === "visible") await load();
      if (Date.now() - lastChange > IDLE_STOP_MS) {
        poller = 0;
        status("No change for 30 minutes: the view stopped looking. Refresh to look again.");
        return;
      }
      poller = setTimeout(tick, pollEvery);
    };
    poller = setTimeout(tick, pollEvery);
  };
  const stopPolling = () => { clearTimeout(poller); poller = 0; };
  if (typeof IntersectionObserver === "function") {
    new IntersectionObserver((es) => { onScreen = es.some((e) => e.isIntersecting); }).observe(document.body);
  }

  const uri = (leaf) => "mcp://forge/sessions/" + encodeURIComponent(sessionId) + "/" + leaf;
  const readJSON = async (u) => {
    const r = await request("resources/read", { uri: u });
    const c = (r && r.contents || [])[0];
    if (!c || typeof c.text !== "string") throw new Error(u + ": no text in the answer");
    return JSON.parse(c.text);
  };

  // load looks at the session's state (cheap: no introspection) and
  // reads the rest only when it changed, and not while a cell runs: the
  // variables are read from the kernel, which answers once the cell ends.
  const load = async (manual) => {
    if (loading || !sessionId) return;
    if (!hostCaps.serverResources) {
      status("This host does not pass resource reads on: the view cannot show the session.");
      return;
    }
    loading = true;
    try {
      const st = await readJSON(uri("state"));
      facts(st);
      if (st.state === "busy" || st.state === "starting") {
        status("A cell is running; the view looks again when it ends.");
        pollEvery = POLL_MS;
        return;
      }
      if (st.state === "suspended") {
        status("Suspended while idle: its whole sandbox is saved, and the next call on it resumes it.");
        pollEvery = Math.min(POLL_MAX_MS, Math.round(pollEvery * 1.5));
        return;
      }
      const stamp = [st.executions, st.last_activity, st.job_id, st.documentation_updated].join("|");
      if (manual || stamp !== lastStamp) {
        const [vars, hist] = await Promise.all([readJSON(uri("variables")), readJSON(uri("history")).catch((e) => ({ error: e.message }))]);
        variables(vars, st.documented_variables || {});
        cells(hist);
        await Promise.all([files(), jobs()]);
        lastStamp = stamp;
        pollEvery = POLL_MS;
        lastChange = Date.now();
      } else {
        pollEvery = Math.min(POLL_MAX_MS, Math.round(pollEvery * 1.5));
      }
      status("Updated " + new Date().toLocaleTimeString() + ".");
    } catch (e) {
      status("Could not read session " + sessionId + ": " + e.message);
      if (/not found/i.test(e.message)) stopPolling();
    } finally {
      loading = false;
    }
  };

  const facts = (st) => {
    const items = [["Language", st.language], ["Backend", st.backend], ["State", st.state], ["Cells run", st.executions],
      ["Last activity", st.last_activity ? new Date(st.last_activity).toLocaleString() : ""], ["Job", st.job_id], ["Note", st.note], ["Lost", st.lost_reason]];
    clear($("facts"), ...items.filter(([, v]) => v !== undefined && v !== null && v !== "")
      .map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: String(v) }))));
  };

  const fmtBytes = (n) => {
    if (typeof n !== "number" || n < 0) return "";
    const units = ["B", "KiB", "MiB", "GiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  };

  const shape = (d) => {
    if (!d || typeof d !== "object") return "";
    if (Array.isArray(d.shape)) return d.shape.join(" × ");
    if (Array.isArray(d.dim)) return d.dim.join(" × ");
    if (d.rows !== undefined && d.columns !== undefined) return d.rows + " × " + (Array.isArray(d.columns) ? d.columns.length : d.columns);
    if (d.length !== undefined) return "length " + d.length;
    return "";
  };

  const variables = (v, docs) => {
    const list = Array.isArray(v.variables) ? v.variables : [];
    if (v.introspection_error) {
      clear($("variables"), el("p", { class: "error", text: "Introspection failed: " + v.introspection_error }));
      return;
    }
    if (!list.length) {
      clear($("variables"), el("p", { class: "empty", text: "No variables yet." }));
      return;
    }
    const head = el("tr", {}, ...["Name", "Type", "Size", "Shape", "Preview", "Documentation"].map((h) => el("th", { scope: "col", text: h })));
    const rows = list.map((x) => {
      const d = x.details || {};
      const preview = el("td", {}, el("code", { text: String(x.repr || "") }));
      if (Array.isArray(d.columns)) {
        preview.append(el("div", { class: "cols", text: "columns: " + d.columns.map((c) => own(d.dtypes, c) ? c + " (" + own(d.dtypes, c) + ")" : c).join(", ") }));
      }
      if (d.dtype) preview.append(el("div", { class: "cols", text: "dtype: " + d.dtype }));
      return el("tr", { "data-name": String(x.name) },
        el("th", { scope: "row" }, el("code", { text: String(x.name) })),
        el("td", { text: String(x.type || "") }),
        el("td", { class: "num", text: fmtBytes(x.size_bytes) }),
        el("td", { text: shape(d) }),
        preview,
        el("td", { text: String(own(docs, x.name) || "") }));
    });
    clear($("variables"), el("table", { id: "variables-table" },
      el("caption", { text: list.length + " variable(s)" + (v.introspected_at ? ", looked at " + new Date(v.introspected_at).toLocaleTimeString() : "") }),
      el("thead", {}, head), el("tbody", {}, ...rows)));
  };

  const image = (mime, data, alt) => {
    if (!IMAGE_TYPES.has(mime) || typeof data !== "string" || !BASE64.test(data)) return null;
    return el("img", { class: "figure", src: "data:" + mime + ";base64," + data, alt });
  };

  // cell draws one executed cell: from the history, or a stateless run's answer.
  const cell = (c, images) => {
    const failed = c.success === false || !!c.error;
    const title = c.execution_count !== undefined ? "Cell [" + c.execution_count + "]" : "Run";
    const box = el("article", { class: "cell" + (failed ? " failed" : ""), "aria-label": title },
      el("h3", {}, title + " ", el("span", { class: failed ? "error" : "ok", text: failed ? "failed" : "ok" }),
        el("span", { class: "meta", text: typeof c.execution_time === "number" ? " · " + c.execution_time.toFixed(3) + " s" : "" })));
    if (c.code) box.append(el("pre", { class: "code", "aria-label": "code" }, el("code", { text: c.code })));
    if (c.stdout) box.append(el("p", { class: "label", text: "stdout" }), el("pre", { class: "stdout", text: c.stdout }));
    if (c.stderr) box.append(el("p", { class: "label", text: "stderr" }), el("pre", { class: "stderr", text: c.stderr }));
    if (c.result_repr) box.append(el("p", { class: "label", text: "result" }), el("pre", { class: "result", text: c.result_repr }));
    if (c.error) {
      const e = c.error;
      box.append(el("pre", { class: "stderr error-text", text: (e.type ? e.type + ": " : "") + (e.message || "") + (e.line ? " (line " + e.line + ")" : "") }));
    }
    images.forEach((im, i) => { const img = image(im.mime, im.data, "Figure " + (i + 1) + " of " + title.toLowerCase()); if (img) box.append(img); });
    if (c.outputs_left_out) box.append(el("p", { class: "meta", text: "Some outputs of this cell were left out of the history." }));
    return box;
  };

  const cells = (h) => {
    if (h.error) {
      clear($("cells"), el("p", { class: "empty", text: "No history: " + h.error }));
      return;
    }
    const list = Array.isArray(h.cells) ? h.cells.slice(-CELLS).reverse() : [];
    if (!list.length) {
      clear($("cells"), el("p", { class: "empty", text: "No cells yet." }));
      return;
    }
    const note = h.cells.length > CELLS ? el("p", { class: "meta", text: "The last " + CELLS + " of " + h.cells.length + " cells, newest first." }) : null;
    clear($("cells"), ...[note, ...list.map((c) => cell(c, (c.images || []).map((im) => ({ mime: im.mime_type, data: im.data }))))].filter(Boolean));
  };

  const files = async () => {
    if (!hostCaps.serverTools) return;
    try {
      const r = await request("tools/call", { name: "list_files", arguments: { session_id: sessionId } });
      const list = (r && r.structuredContent && r.structuredContent.files) || [];
      if (!list.length) {
        clear($("files"), el("p", { class: "empty", text: "No files yet." }));
        return;
      }
      const head = el("tr", {}, ...["Path", "Type", "Size", "Modified"].map((h) => el("th", { scope: "col", text: h })));
      clear($("files"), el("table", { id: "files-table" }, el("caption", { text: list.length + " entries in the working directory" }),
        el("thead", {}, head), el("tbody", {}, ...list.map((f) => el("tr", {},
          el("td", {}, el("code", { text: String(f.path) })), el("td", { text: String(f.type || "") }),
          el("td", { class: "num", text: f.type === "file" ? fmtBytes(f.size) : "" }),
          el("td", { text: f.modified ? new Date(f.modified).toLocaleString() : "" }))))));
    } catch (e) {
      clear($("files"), el("p", { class: "empty", text: "Files could not be listed: " + e.message }));
    }
  };

  const jobs = async () => {
    try {
      const all = await readJSON("mcp://forge/jobs");
      const list = (Array.isArray(all) ? all : all.jobs || []).filter((j) => j.session_id === sessionId && (j.state === "running" || j.state === "queued"));
      clear($("jobs"), ...(list.length ? list.map((j) => el("p", {}, el("code", { text: String(j.job_id || j.id) }), " " + j.state + (typeof j.elapsed_s === "number" && j.state === "running" ? " for " + Math.round(j.elapsed_s) + " s" : "")))
        : [el("p", { class: "empty", text: "None." })]));
    } catch (e) {
      clear($("jobs"), el("p", { class: "empty", text: "Jobs could not be read: " + e.message }));
    }
  };

  const statelessRun = (res) => {
    const sc = res.structuredContent || {};
    $("title").textContent = "A stateless run";
    status("A run in a fresh sandbox: it left no session to show.");
    const images = (res.content || []).filter((c) => c && c.type === "image").map((c) => ({ mime: c.mimeType, data: c.data }));
    clear($("cells"), cell(sc, images));
  };

  $("refresh").addEventListener("click", () => { load(true); if (!poller && sessionId) startPolling(); });

  // The handshake: ui/initialize, then initialized; the host sends the
  // tool's input and result after.
  const start = async () => {
    try {
      const r = await request("ui/initialize", {
        protocolVersion: PROTOCOL,
        appInfo: { name: "mcp-forge-session-view", version: "1.0.0" },
        appCapabilities: {},
      });
      hostCaps = (r && r.hostCapabilities) || {};
      theme(r && r.hostContext && r.hostContext.theme);
      notify("ui/notifications/initialized", {});
      status(sessionId ? "Loading…" : "Waiting for the tool's answer…");
    } catch (e) {
      status("The host did not start the view: " + e.message);
    }
  };
  if (typeof ResizeObserver === "function") {
    new ResizeObserver(() => notify("ui/notifications/size-changed",
      { width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight })).observe(document.body);
  }
  start();
})();
