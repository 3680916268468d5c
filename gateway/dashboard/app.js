// The mediajobs dashboard: a small script over the JSON API (the same the SDKs
// use), signed in with a session cookie (HttpOnly, SameSite=Strict) and a CSRF
// token sent on every state-changing request. No framework, no outside request.
"use strict";

const state = { csrf: "", account: null, streams: [] };
const $ = (sel, el = document) => el.querySelector(sel);
const main = () => $("#main");

// h builds an element: h("a", {href: "#/x"}, "text", child...). Text is always
// text (never parsed as HTML).
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}

function say(msg) { $("#live").textContent = msg; }

// api calls the JSON API; a non-2xx answer throws {status, code, message, details}.
async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: "same-origin" };
  if (method !== "GET" && method !== "HEAD") opts.headers["X-CSRF-Token"] = state.csrf;
  if (body !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(body);
  }
  const resp = await fetch(path, opts);
  let data = null;
  try { data = await resp.json(); } catch (e) { /* not JSON */ }
  if (!resp.ok) {
    const err = new Error((data && data.message) || resp.statusText);
    Object.assign(err, { status: resp.status, code: data && data.errorCode, details: (data && data.details) || {} });
    throw err;
  }
  return data;
}

function closeStreams() {
  for (const s of state.streams) s.close();
  state.streams = [];
}

function stream(path, on) {
  const es = new EventSource(path);
  for (const [name, fn] of Object.entries(on)) {
    es.addEventListener(name, (ev) => fn(JSON.parse(ev.data || "{}")));
  }
  state.streams.push(es);
  return es;
}

function fmtTime(t) { return t ? new Date(t).toLocaleString() : "—"; }
function fmtBytes(n) {
  if (n === null || n === undefined) return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}
function fmtDuration(s) {
  if (s === null || s === undefined) return "";
  s = Math.round(s);
  return s >= 3600 ? `${Math.floor(s / 3600)}h${String(Math.floor(s / 60) % 60).padStart(2, "0")}m` : s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}
function statusChip(s) { return h("span", { class: "status " + s, "data-status": s }, s); }
function progressText(p) {
  if (!p) return "";
  const parts = [];
  if (p.percent !== null && p.percent !== undefined) parts.push(p.percent.toFixed(0) + "%");
  if (p.command_count > 1) parts.push(`command ${p.command_index}/${p.command_count}`);
  if (p.fps) parts.push(p.fps.toFixed(0) + " fps");
  if (p.speed) parts.push(p.speed.toFixed(2) + "×");
  if (p.eta_seconds !== null && p.eta_seconds !== undefined) parts.push("ETA " + fmtDuration(p.eta_seconds));
  return parts.join(" · ");
}

// ---- session ----

// loadSession learns the session and its CSRF token; false when signed out. A
// server that cannot answer is not a sign-out: that error is thrown.
async function loadSession() {
  try {
    const r = await api("GET", "/dashboard/session");
    state.csrf = r.data.csrf_token;
    state.account = r.data.account;
    return true;
  } catch (e) {
    if (e.status !== 401) throw e;
    state.csrf = ""; state.account = null;
    return false;
  }
}

function showSignIn(message) {
  closeStreams();
  $("#nav").hidden = true;
  const err = h("p", { class: "error", id: "signin-error", role: "alert" }, message || "");
  const input = h("input", { id: "api-key", name: "api_key", type: "password", autocomplete: "off", required: true, "aria-describedby": "signin-error", spellcheck: "false" });
  const form = h("form", { id: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    err.textContent = "";
    try {
      const r = await api("POST", "/dashboard/session", { api_key: input.value.trim() });
      state.csrf = r.data.csrf_token; state.account = r.data.account;
      input.value = "";
      if (!location.hash || location.hash === "#/signin") location.hash = "#/jobs"; // hashchange routes
      else route();
    } catch (e) {
      err.textContent = e.message;
      input.focus();
    }
  } },
    h("label", { for: "api-key" }, "API key"),
    input,
    h("p", { class: "muted" }, "Sign in with one of your account's API keys (mj_…). The key is exchanged for a session; it is not kept in the browser."),
    h("button", { type: "submit", class: "primary" }, "Sign in"), err);
  main().replaceChildren(h("h1", {}, "Sign in"), form);
  if (new URLSearchParams(location.search).get("error") === "link") err.textContent = "That sign-in link is invalid, used or expired; ask for a new one.";
  input.focus();
}

async function signOut() {
  try { await api("DELETE", "/dashboard/session"); } catch (e) { /* gone already */ }
  state.csrf = ""; state.account = null;
  state.signedOut = true;
  if (location.hash !== "#/signin") location.hash = "#/signin"; // hashchange shows sign-in
  else showSignIn("Signed out.");
}

// ---- router ----

async function route() {
  closeStreams();
  let signedIn = !!state.account;
  if (!signedIn) {
    try { signedIn = await loadSession(); } catch (e) {
      main().replaceChildren(h("h1", {}, "The service is not answering"), h("p", { class: "error", role: "alert" }, e.message + " — try again in a moment."));
      return;
    }
  }
  if (!signedIn) {
    const msg = state.signedOut ? "Signed out." : "";
    state.signedOut = false;
    return showSignIn(msg);
  }
  $("#nav").hidden = false;
  $("#who").textContent = state.account.name;
  const [path, query] = (location.hash.slice(1) || "/jobs").split("?");
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("nav a")) {
    a.toggleAttribute("aria-current", path.startsWith(a.getAttribute("href").slice(1)));
    if (a.hasAttribute("aria-current")) a.setAttribute("aria-current", "page");
  }
  const parts = path.split("/").filter(Boolean);
  try {
    if (parts[0] === "jobs" && parts[1]) await showJob(decodeURIComponent(parts[1]));
    else if (parts[0] === "pipelines" && parts[1]) await showPipeline(decodeURIComponent(parts[1]));
    else if (parts[0] === "pipelines") await showPipelines(params);
    else if (parts[0] === "new") showNewJob();
    else if (parts[0] === "keys") await showKeys();
    else if (parts[0] === "usage") await showUsage(params);
    else await showJobs(params);
  } catch (e) {
    if (e.status === 401) return showSignIn("Your session ended; sign in again.");
    main().replaceChildren(h("h1", {}, "Something went wrong"), h("p", { class: "error", role: "alert" }, e.message));
  }
  if (!main().contains(document.activeElement)) main().focus();
}

// ---- jobs ----

const STATUSES = ["", "queued", "running", "succeeded", "failed", "cancelled"];
const PAGE = 20;

async function showJobs(params) {
  const status = params.get("status") || "";
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const q = new URLSearchParams({ limit: PAGE, offset });
  if (status) q.set("status", status);
  const r = await api("GET", "/api/jobs?" + q);
  const tbody = h("tbody", {});
  const rows = new Map();
  const rowOf = (j) => {
    const tr = h("tr", { "data-id": j.id },
      h("td", {}, h("a", { href: "#/jobs/" + encodeURIComponent(j.id), class: "mono" }, j.id.slice(0, 8))),
      h("td", {}, statusChip(j.status)),
      h("td", { class: "progress-cell" }, j.status === "running" ? progressText(j.progress) : (j.status === "failed" ? (j.error_message || "").split("\n")[0] : j.status_detail || "")),
      h("td", { class: "hide-narrow" }, fmtTime(j.created_at)),
      h("td", { class: "hide-narrow" }, j.machine));
    return tr;
  };
  for (const j of r.data) { const tr = rowOf(j); rows.set(j.id, tr); tbody.append(tr); }
  const filter = h("select", { id: "status-filter", onchange: (ev) => { location.hash = "#/jobs" + (ev.target.value ? "?status=" + ev.target.value : ""); } },
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s || "all")));
  const paging = r.pagingParams || {};
  const nav = h("div", { class: "row" },
    h("span", { class: "muted" }, `${paging.total || 0} job(s)` + (paging.total ? `, ${offset + 1}–${offset + r.data.length}` : "")),
    offset > 0 ? h("a", { class: "button", href: `#/jobs?${new URLSearchParams({ status, offset: Math.max(0, offset - PAGE) })}` }, "Newer") : "",
    paging.hasMore ? h("a", { class: "button", href: `#/jobs?${new URLSearchParams({ status, offset: offset + PAGE })}` }, "Older") : "");
  main().replaceChildren(
    h("h1", {}, "Jobs"),
    h("div", { class: "row" }, h("div", {}, h("label", { for: "status-filter" }, "Status"), filter), h("div", {}, h("a", { class: "button", href: "#/new" }, "New job"))),
    r.data.length ? h("table", { id: "jobs" }, h("thead", {}, h("tr", {}, h("th", {}, "Job"), h("th", {}, "Status"), h("th", {}, "Progress / detail"), h("th", { class: "hide-narrow" }, "Created"), h("th", { class: "hide-narrow" }, "Machine"))), tbody)
      : h("p", { class: "muted" }, "No jobs" + (status ? " with status " + status : "") + " yet."),
    nav);
  // Live: every change of the account's jobs; new ones on the first page.
  stream("/api/events", {
    job: (j) => {
      const old = rows.get(j.id);
      if (old) { const tr = rowOf(j); old.replaceWith(tr); rows.set(j.id, tr); say(`job ${j.id.slice(0, 8)} ${j.status}`); return; }
      if (offset === 0 && (!status || status === j.status) && $("#jobs")) { const tr = rowOf(j); rows.set(j.id, tr); tbody.prepend(tr); }
    },
    resync: () => route(),
    end: () => { state.account = null; route(); },
  });
}

async function showJob(id) {
  const r = await api("GET", "/api/jobs/" + encodeURIComponent(id));
  const view = h("div", { id: "job" });
  main().replaceChildren(h("p", {}, h("a", { href: "#/jobs" }, "← Jobs")), view);
  let lastOutputs = "";
  const render = (j) => {
    const cancel = (j.status === "queued" || j.status === "running") ? h("button", { type: "button", class: "danger", id: "cancel", onclick: async () => {
      if (!confirm(`Cancel job ${j.id}?`)) return;
      try { render((await api("POST", `/api/jobs/${encodeURIComponent(j.id)}/cancel`)).data); } catch (e) { alert(e.message); }
    } }, "Cancel job") : "";
    const pct = j.progress && j.progress.percent;
    const parts = [
      h("h1", {}, "Job ", h("span", { class: "mono" }, j.id)),
      h("p", {}, statusChip(j.status), " ", h("span", { id: "status-detail" }, j.status_detail || ""), " ", cancel),
      j.pipeline ? h("p", { id: "job-pipeline" }, "Step ", h("code", {}, j.pipeline.step + (j.pipeline.item === undefined || j.pipeline.item === null ? "" : `[${j.pipeline.item}]`)), " of ",
        h("a", { href: "#/pipelines/" + encodeURIComponent(j.pipeline.id) }, "pipeline " + j.pipeline.id.slice(0, 8))) : "",
      j.status === "running" ? h("div", { class: "card", id: "progress" },
        pct !== null && pct !== undefined ? h("progress", { max: 100, value: pct, "aria-label": "progress" }) : "",
        h("p", {}, progressText(j.progress) || "running")) : "",
      j.error_message ? h("div", { class: "card" }, h("h2", {}, "Error"), h("pre", { class: "mono error", id: "error-message" }, j.error_message)) : "",
      chunked(j) ? chunksCard(j) : "",
      chunked(j) && j.parallel.verification ? verificationCard(j.parallel.verification) : "",
      j.parallel && j.parallel.mode === "single" ? h("p", { id: "parallel-single", class: "muted" }, "Runs as one job, not in chunks: " + j.parallel.reason) : "",
      h("h2", {}, "Commands"),
      h("ol", {}, j.ffmpeg_commands.map((c, i) => h("li", {}, h("code", {}, "ffmpeg " + c), j.logs && j.logs[String(i + 1)] ? [" ", h("a", { href: j.logs[String(i + 1)] }, "log")] : ""))),
      Object.keys(j.input_files).length ? [h("h2", {}, "Inputs"), h("dl", {}, Object.entries(j.input_files).flatMap(([k, v]) => [h("dt", {}, k), h("dd", { class: "mono" }, v)]))] : "",
      h("h2", {}, "Timings"),
      h("dl", {}, h("dt", {}, "Created"), h("dd", {}, fmtTime(j.created_at)), h("dt", {}, "Started"), h("dd", {}, fmtTime(j.started_at)), h("dt", {}, "Finished"), h("dd", {}, fmtTime(j.finished_at)),
        h("dt", {}, "Machine"), h("dd", {}, j.machine), h("dt", {}, "Timeout"), h("dd", {}, fmtDuration(j.timeout_seconds))),
      j.webhook ? [h("h2", {}, "Webhook"), h("dl", {}, h("dt", {}, "URL"), h("dd", { class: "mono" }, j.webhook_url || ""), h("dt", {}, "Delivery"), h("dd", { id: "webhook-state" }, `${j.webhook.status}` + (j.webhook.attempts ? `, ${j.webhook.attempts} attempt(s)` : "") + (j.webhook.last_error ? ` — ${j.webhook.last_error}` : "")))] : "",
    ];
    // Outputs are rendered once (their players would restart on every redraw).
    const outputsKey = JSON.stringify(j.output_files);
    let outputs = $("#outputs", view);
    if (!outputs || outputsKey !== lastOutputs) {
      lastOutputs = outputsKey;
      outputs = h("section", { id: "outputs" }, Object.keys(j.output_files).length ? h("h2", {}, "Outputs") : "",
        Object.entries(j.output_files).map(([name, url]) => outputCard(name, url, (j.outputs || {})[name] || {})));
    }
    view.replaceChildren(...parts.flat(), outputs);
  };
  render(r.data);
  // A chunked job's events carry its chunks (parallel.steps), so one stream
  // draws its progress across them too.
  if (!["succeeded", "failed", "cancelled"].includes(r.data.status)) {
    let said = r.data.status; // announced once per status, not per chunk's event
    stream(`/api/jobs/${encodeURIComponent(id)}/events`, {
      job: (j) => { render(j); if (j.status !== said) { said = j.status; say(`job ${j.status}`); } },
      end: (d) => { closeStreams(); if (d && d.reason) { state.account = null; route(); } },
    });
  }
}

// ---- chunked jobs (docs/chunked.md) ----

function chunked(j) { return !!(j.parallel && j.parallel.mode === "chunked"); }

// chunkStats counts a chunked job's chunks (the encode step's jobs) by state;
// total is 0 until the plan step has cut the source.
function chunkStats(j) {
  const steps = (j.parallel && j.parallel.steps) || [];
  const encode = steps.find((s) => s.name === "encode");
  const jobs = encode ? encode.jobs : [];
  const n = (st) => jobs.filter((c) => c.status === st).length;
  return { steps, jobs, total: jobs.length, done: n("succeeded"), running: n("running"), failed: n("failed") };
}

function chunkSpan(item) {
  if (!item || item.start === undefined) return "";
  const f = (x) => (Math.round(parseFloat(x) * 100) / 100).toString();
  return `${f(item.start)}–${f(item.end)} s` + (item.frames ? ` (${item.frames} frames)` : "");
}

// chunksCard is a chunked job's progress: chunks done of all, each chunk's
// state, and the other steps (plan, audio, stitch).
function chunksCard(j) {
  const c = chunkStats(j);
  const plan = c.steps.find((s) => s.name === "plan");
  const summary = c.total ? `${c.done}/${c.total} chunks done` + (c.running ? `, ${c.running} running` : "") + (c.failed ? `, ${c.failed} failed` : "")
    : plan && plan.status === "failed" ? "the plan step failed: no chunks" : "chunks not planned yet (the plan step cuts the source at its keyframes)";
  const detail = (x) => x.status === "running" ? progressText(x.progress) : x.status === "failed" ? (x.error_message || "").split("\n")[0] : x.status === "queued" ? x.status_detail : "";
  return h("section", { class: "card", id: "chunks", "aria-label": "chunks" },
    h("h2", {}, "Chunks"),
    h("p", { id: "chunks-summary", "data-done": c.done, "data-total": c.total }, summary,
      h("span", { class: "muted" }, ` · about ${j.parallel.chunk_seconds} s each, at most ${j.parallel.max_workers} at once`)),
    c.total ? h("progress", { max: c.total, value: c.done, "aria-label": "chunks done" }) : "",
    c.total ? h("ol", { id: "chunk-list", class: "chunks", start: 0 }, c.jobs.map((x, i) => h("li", { "data-chunk": i, "data-status": x.status },
      h("a", { href: "#/jobs/" + encodeURIComponent(x.id), class: "mono" }, "chunk " + i), " ", statusChip(x.status), " ",
      h("span", { class: "muted" }, chunkSpan(x.item)), detail(x) ? h("span", { class: "muted detail" }, " — " + detail(x)) : ""))) : "",
    h("p", { id: "chunk-steps" }, c.steps.filter((s) => s.name !== "encode").map((s) => h("span", { class: "chunk-step", "data-step": s.name, "data-status": s.status },
      s.name, " ", statusChip(s.status), " "))),
    j.parallel.pipeline_id ? h("p", { class: "muted" }, "Its steps as a graph: ",
      h("a", { href: "#/pipelines/" + encodeURIComponent(j.parallel.pipeline_id), id: "chunk-pipeline" }, "pipeline " + j.parallel.pipeline_id.slice(0, 8))) : "");
}

// verificationCard summarises the stitch's verification report: its verdict,
// then each check with whether it held.
function verificationCard(v) {
  const check = (key, ok, label) => h("li", { "data-check": key, "data-ok": ok ? "true" : "false" }, h("span", { class: ok ? "ok" : "bad" }, ok ? "✓ " : "✗ "), label);
  const chunks = v.chunks || [];
  const seams = chunks.filter((c) => c.seam);
  const fmt = (x) => (x === undefined || x === null ? "?" : Number(x).toFixed(3));
  const items = [
    check("frames", v.expected_frames === v.packets && v.packets === v.decoded_frames,
      `frames: ${v.expected_frames} in the source, ${v.packets} stitched, ${v.decoded_frames} decoded`),
    chunks.length ? check("chunks", chunks.every((c) => c.hashes_match && c.decoded_frames === c.expected_frames),
      `${chunks.filter((c) => c.hashes_match).length}/${chunks.length} chunks decode to the same pictures alone and stitched`) : "",
    seams.length ? check("seams", seams.every((c) => c.seam.keyframe && c.seam.closed && Math.abs(c.seam.gap || 0) <= ((v.duration && v.duration.tolerance) || 0.001)),
      `${seams.length} seam(s): each a closed keyframe, no gap or overlap`) : "",
    v.timestamps ? check("timestamps", v.timestamps.monotonic && v.timestamps.match_source,
      "timestamps increase and match the source's" + (v.timestamps.first_mismatch ? ` (first mismatch: ${v.timestamps.first_mismatch})` : "")) : "",
    v.duration ? check("duration", v.duration.ok, `the video lasts ${fmt(v.duration.output)} s, the source's ${fmt(v.duration.source)} s`) : "",
    v.av ? check("av", v.av.ok, `the audio ends ${fmt(v.av.output)} s after the video, in the source ${fmt(v.av.source)} s`) : "",
    v.decode ? check("decode", v.decode.clean, (v.decode.clean ? "decodes without an error" : "decode errors: " + (v.decode.errors || "")) +
      (v.decode.mode === "seams" ? ` (the stitched file's packets are the chunks': ${v.decode.frames} frames decoded again across the seams)`
        : v.decode.mode === "full" ? ` (decoded whole: ${v.decode.full_reason || ""})` : "")) : "",
  ];
  return h("section", { class: "card", id: "verification", "aria-label": "verification" },
    h("h2", {}, "Verification"),
    h("p", { id: "verification-verdict", "data-pass": v.pass ? "true" : "false" },
      h("span", { class: "status " + (v.pass ? "succeeded" : "failed") }, v.pass ? "passed" : "failed"),
      " ", h("span", { class: "muted" }, v.pass ? "the stitched file was checked against the source before it was published" : "the stitched file was not published")),
    h("ul", { id: "verification-checks", class: "checks" }, items),
    v.failures && v.failures.length ? [h("h3", {}, "Failures"), h("ul", { id: "verification-failures" }, v.failures.map((f) => h("li", { class: "error" }, f)))] : "",
    v.whole_report ? h("p", { class: "muted" }, v.whole_report) : "");
}

function outputCard(name, url, info) {
  const streams = info.streams || [];
  const ext = (name.split(".").pop() || "").toLowerCase();
  const image = ["jpg", "jpeg", "png", "gif", "webp", "avif", "bmp"].includes(ext);
  const video = !image && streams.some((s) => s.type === "video");
  const audio = !image && !video && streams.some((s) => s.type === "audio");
  let player = "";
  if (image) player = h("img", { src: url, alt: "preview of " + name, loading: "lazy" });
  else if (video) player = h("video", { src: url, controls: true, preload: "metadata", "aria-label": "preview of " + name });
  else if (audio) player = h("audio", { src: url, controls: true, preload: "metadata", "aria-label": "preview of " + name });
  const desc = [fmtBytes(info.size_bytes), info.format, info.duration_seconds ? fmtDuration(info.duration_seconds) : "",
    ...streams.map((s) => [s.type, s.codec, s.width ? `${s.width}×${s.height}` : "", s.sample_rate ? `${s.sample_rate} Hz` : "", s.channels ? `${s.channels} ch` : ""].filter(Boolean).join(" "))].filter(Boolean);
  return h("div", { class: "card preview", "data-output": name },
    h("p", {}, h("a", { href: url, class: "mono" }, name), " ", h("span", { class: "muted" }, desc.join(" · "))), player);
}

// ---- pipelines ----

const TERMINAL = ["succeeded", "failed", "cancelled", "deleted"]; // deleted: a step's job the retention removed

function itemLabel(item, index) {
  const parts = Object.entries(item || {}).map(([k, v]) => `${k}=${v}`);
  return parts.length ? parts.join(" ") : `#${index}`;
}

// elapsed is how long a step or job has run: its duration once ended, the time
// since it started while it runs (kept current by a timer on the page).
function elapsed(startedAt, finishedAt, duration) {
  if (duration !== null && duration !== undefined) return fmtDuration(duration);
  if (!startedAt) return "";
  const end = finishedAt ? new Date(finishedAt) : new Date();
  return fmtDuration(Math.max(0, (end - new Date(startedAt)) / 1000)) + (finishedAt ? "" : " so far");
}

function jobsDone(v) {
  let done = 0, all = 0;
  for (const s of v.steps) for (const j of s.jobs) { all++; if (TERMINAL.includes(j.status)) done++; }
  return `${done}/${all}`;
}

async function showPipelines(params) {
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const load = () => api("GET", "/api/pipelines?" + new URLSearchParams({ limit: PAGE, offset }));
  const r = await load();
  const tbody = h("tbody", {});
  const fill = (list) => tbody.replaceChildren(...list.map((p) => h("tr", { "data-id": p.id },
    h("td", {}, h("a", { href: "#/pipelines/" + encodeURIComponent(p.id), class: "mono" }, p.id.slice(0, 8))),
    h("td", {}, statusChip(p.status)),
    h("td", {}, p.steps.map((s) => s.name).join(", ")),
    h("td", { class: "jobs-done" }, jobsDone(p)),
    h("td", { class: "hide-narrow" }, fmtTime(p.created_at)))));
  fill(r.data);
  const paging = r.pagingParams || {};
  main().replaceChildren(
    h("h1", {}, "Pipelines"),
    h("p", { class: "muted" }, "Graphs of jobs sent as one request (POST /api/pipelines; see the docs' pipelines page)."),
    r.data.length ? h("table", { id: "pipelines" }, h("thead", {}, h("tr", {}, h("th", {}, "Pipeline"), h("th", {}, "Status"), h("th", {}, "Steps"), h("th", {}, "Jobs ended"), h("th", { class: "hide-narrow" }, "Created"))), tbody)
      : h("p", { class: "muted" }, "No pipelines yet."),
    h("div", { class: "row" },
      h("span", { class: "muted" }, `${paging.total || 0} pipeline(s)`),
      offset > 0 ? h("a", { class: "button", href: `#/pipelines?offset=${Math.max(0, offset - PAGE)}` }, "Newer") : "",
      paging.hasMore ? h("a", { class: "button", href: `#/pipelines?offset=${offset + PAGE}` }, "Older") : ""));
  // Live: a change of any job of a pipeline reads the page again (at most
  // about once a second).
  let timer = 0;
  stream("/api/events", {
    job: (j) => {
      if (!j.pipeline || timer) return;
      timer = setTimeout(async () => {
        timer = 0;
        try { const again = await load(); if ($("#pipelines")) fill(again.data); else if (again.data.length) route(); } catch (e) { /* the next change tries again */ }
      }, 1000);
    },
    resync: () => route(),
    end: () => { state.account = null; route(); },
  });
}

// pipelineGraph draws the steps as nodes in columns, each after the steps it
// takes outputs of, with an edge from each of those; edges are drawn once the
// nodes are laid out (drawEdges).
function pipelineGraph(v) {
  const depth = {};
  for (const s of v.steps) depth[s.name] = Math.max(0, ...s.needs.map((n) => (depth[n] === undefined ? -1 : depth[n]) + 1));
  const cols = [];
  for (const s of v.steps) (cols[depth[s.name]] = cols[depth[s.name]] || []).push(s);
  const node = (s) => {
    const fanned = s.jobs.length > 1 || s.jobs.some((j) => j.item);
    const outputs = (j) => Object.entries(j.output_files || {}).map(([name, url]) => h("a", { href: url, class: "mono output", "data-key": `out:${j.id}:${name}` }, name));
    const detail = (j) => j.status === "running" ? progressText(j.progress) : j.status === "failed" ? (j.error_message || "").split("\n")[0] : j.status === "queued" ? j.status_detail : "";
    const body = fanned
      ? h("ol", { class: "items" }, s.jobs.map((j, i) => h("li", { "data-item": i, "data-status": j.status },
        h("a", { href: "#/jobs/" + encodeURIComponent(j.id), class: "mono", "data-key": `job:${j.id}` }, itemLabel(j.item, i)), " ", statusChip(j.status),
        " ", h("span", { class: "muted" }, elapsed(j.started_at, j.finished_at)),
        detail(j) ? h("div", { class: "muted detail" }, detail(j)) : "",
        outputs(j).length ? h("div", { class: "outputs" }, outputs(j)) : "")))
      : s.jobs.flatMap((j) => [
        h("p", {}, h("a", { href: "#/jobs/" + encodeURIComponent(j.id), class: "mono", "data-key": `job:${j.id}` }, "job " + j.id.slice(0, 8))),
        detail(j) ? h("p", { class: "muted detail" }, detail(j)) : "",
        outputs(j).length ? h("div", { class: "outputs" }, outputs(j)) : ""]);
    return h("section", { class: "node " + s.status, "data-step": s.name, "data-status": s.status, "data-needs": s.needs.join(","), "aria-label": `step ${s.name}, ${s.status}` },
      h("h2", {}, s.name, " ", statusChip(s.status), " ",
        h("span", { class: "duration muted", "data-started": s.started_at || "", "data-finished": s.finished_at || "", "data-duration": s.duration_seconds === null ? "" : s.duration_seconds },
          elapsed(s.started_at, s.finished_at, s.duration_seconds))),
      s.needs.length || fanned ? h("p", { class: "muted" }, s.needs.length ? "takes outputs of " + s.needs.join(", ") : "",
        s.needs.length && fanned ? h("br") : "", fanned ? `${s.jobs.length} items` : "") : "",
      body);
  };
  return h("div", { class: "graph", id: "graph" },
    svg("svg", { class: "edges", "aria-hidden": "true" },
      svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "6", markerHeight: "6", orient: "auto-start-reverse" }, svg("path", { d: "M 0 0 L 10 5 L 0 10 z" })))),
    cols.map((col, i) => h("div", { class: "graph-col", "data-depth": i }, col.map(node))));
}

// drawEdges draws an edge from each step to each step that takes its outputs,
// from the nodes' places on the page.
function drawEdges(graph) {
  if (!graph || !graph.isConnected) return;
  const edges = $("svg.edges", graph);
  const box = graph.getBoundingClientRect();
  edges.setAttribute("width", graph.scrollWidth);
  edges.setAttribute("height", graph.scrollHeight);
  for (const p of edges.querySelectorAll("path.edge")) p.remove();
  for (const to of graph.querySelectorAll(".node")) {
    for (const name of (to.dataset.needs || "").split(",").filter(Boolean)) {
      const from = graph.querySelector(`.node[data-step="${CSS.escape(name)}"]`);
      if (!from) continue;
      const a = from.getBoundingClientRect(), b = to.getBoundingClientRect();
      const x1 = a.right - box.left + graph.scrollLeft, y1 = a.top + Math.min(a.height / 2, 40) - box.top + graph.scrollTop;
      const x2 = b.left - box.left + graph.scrollLeft, y2 = b.top + Math.min(b.height / 2, 40) - box.top + graph.scrollTop;
      const dx = Math.max(20, (x2 - x1) / 2);
      edges.append(svg("path", { class: "edge " + from.dataset.status, "data-from": name, "data-to": to.dataset.step, "marker-end": "url(#arrow)",
        d: `M${x1.toFixed(1)},${y1.toFixed(1)} C${(x1 + dx).toFixed(1)},${y1.toFixed(1)} ${(x2 - dx).toFixed(1)},${y2.toFixed(1)} ${x2.toFixed(1)},${y2.toFixed(1)}` }));
    }
  }
}

async function showPipeline(id) {
  const r = await api("GET", "/api/pipelines/" + encodeURIComponent(id));
  const view = h("div", { id: "pipeline" });
  main().replaceChildren(h("p", {}, h("a", { href: "#/pipelines" }, "← Pipelines")), view);
  const seen = {};
  const render = (v) => {
    const key = document.activeElement && view.contains(document.activeElement) && document.activeElement.dataset.key;
    const cancel = TERMINAL.includes(v.status) ? "" : h("button", { type: "button", class: "danger", id: "cancel", onclick: async () => {
      if (!confirm(`Cancel pipeline ${v.id} and every job of it not ended?`)) return;
      try { render((await api("POST", `/api/pipelines/${encodeURIComponent(v.id)}/cancel`)).data); } catch (e) { alert(e.message); }
    } }, "Cancel pipeline");
    const graph = pipelineGraph(v);
    view.replaceChildren(
      h("h1", {}, "Pipeline ", h("span", { class: "mono" }, v.id)),
      h("p", {}, h("span", { id: "pipeline-status", "data-status": v.status }, statusChip(v.status)), " ", h("span", { class: "muted" }, `${jobsDone(v)} jobs ended`), " ", cancel),
      v.error_message ? h("div", { class: "card" }, h("h2", {}, "Error"), h("pre", { class: "mono error", id: "error-message" }, v.error_message)) : "",
      graph,
      h("dl", {}, h("dt", {}, "Created"), h("dd", {}, fmtTime(v.created_at)), h("dt", {}, "Started"), h("dd", {}, fmtTime(v.started_at)),
        h("dt", {}, "Finished"), h("dd", {}, fmtTime(v.finished_at)), h("dt", {}, "Fail fast"), h("dd", {}, v.fail_fast ? "yes" : "no"),
        v.webhook ? [h("dt", {}, "Webhook"), h("dd", { id: "webhook-state" }, `${v.webhook.status}` + (v.webhook.attempts ? `, ${v.webhook.attempts} attempt(s)` : ""))] : ""));
    drawEdges(graph);
    if (key) { const el = view.querySelector(`[data-key="${CSS.escape(key)}"]`); if (el) el.focus(); }
    for (const s of v.steps) {
      if (seen[s.name] && seen[s.name] !== s.status) say(`step ${s.name} ${s.status}`);
      seen[s.name] = s.status;
    }
  };
  render(r.data);
  const redraw = () => drawEdges($("#graph"));
  window.addEventListener("resize", redraw);
  // Running steps' times tick each second.
  const tick = setInterval(() => {
    for (const d of document.querySelectorAll("#graph .duration")) {
      if (d.dataset.started && !d.dataset.finished && !d.dataset.duration) d.textContent = elapsed(d.dataset.started, null);
    }
  }, 1000);
  state.streams.push({ close: () => { clearInterval(tick); window.removeEventListener("resize", redraw); } });
  if (!TERMINAL.includes(r.data.status) || !r.data.finished_at) {
    const es = stream(`/api/pipelines/${encodeURIComponent(id)}/events`, {
      pipeline: (v) => render(v),
      end: (d) => { es.close(); if (d && d.reason) { state.account = null; route(); return; } say("pipeline ended"); },
    });
  }
}

// ---- new job ----

function showNewJob() {
  const errs = {};
  const fieldError = (key) => (errs[key] = h("p", { class: "field-error", id: "err-" + key.replace(/[^a-z0-9_]/gi, "-") }));
  const inputsBox = h("div", { id: "inputs" });
  let n = 0;
  const addInput = () => {
    n++;
    const row = h("fieldset", { class: "card input-row" },
      h("legend", {}, `Input ${n}`),
      h("label", { for: `in-name-${n}` }, "Name (used as {{name}} in commands)"), h("input", { id: `in-name-${n}`, class: "in-name", value: n === 1 ? "video" : "", pattern: "[A-Za-z0-9][A-Za-z0-9._-]{0,127}" }),
      h("label", { for: `in-url-${n}` }, "URL"), h("input", { id: `in-url-${n}`, class: "in-url", type: "url", placeholder: "https://…" }),
      h("label", { for: `in-file-${n}` }, "or a local file (uploaded as a temporary file)"), h("input", { id: `in-file-${n}`, class: "in-file", type: "file" }),
      h("p", { class: "field-error in-error" }));
    inputsBox.append(row);
  };
  addInput();
  const outputs = h("input", { id: "outputs-field", value: "out.mp4", "aria-describedby": "err-output_files" });
  const commands = h("textarea", { id: "commands-field", "aria-describedby": "err-ffmpeg_commands" }, "-i {{video}} -vf scale=640:-2 {{out.mp4}}");
  const machine = h("input", { id: "machine-field", placeholder: "cpu" });
  const timeout = h("input", { id: "timeout-field", type: "number", min: 1, placeholder: "default" });
  const webhook = h("input", { id: "webhook-field", type: "url", placeholder: "https://…" });
  // Chunked encoding (docs/chunked.md): empty numbers take the service's defaults.
  const parallel = h("input", { id: "parallel-field", type: "checkbox", "aria-describedby": "err-parallel" });
  const chunkSeconds = h("input", { id: "chunk-seconds-field", type: "number", min: 1, step: "any", placeholder: "default", "aria-describedby": "err-parallel-chunk_seconds" });
  const maxWorkers = h("input", { id: "max-workers-field", type: "number", min: 1, placeholder: "default", "aria-describedby": "err-parallel-max_workers" });
  const fallback = h("input", { id: "fallback-field", type: "checkbox" });
  const parallelBox = h("fieldset", { class: "card", id: "parallel-box" },
    h("legend", {}, "Encode in chunks"),
    h("label", { class: "check" }, parallel, " Split the video at keyframes, encode the chunks on several workers, stitch and verify (one command, one input, one output)"),
    fieldError("parallel"),
    h("div", { class: "row" },
      h("div", {}, h("label", { for: "chunk-seconds-field" }, "Chunk length (seconds)"), chunkSeconds, fieldError("parallel.chunk_seconds")),
      h("div", {}, h("label", { for: "max-workers-field" }, "At most this many chunks at once"), maxWorkers, fieldError("parallel.max_workers"))),
    h("label", { class: "check" }, fallback, " If it cannot be split, run it as one ordinary job instead of refusing it"));
  const formError = h("p", { class: "error", role: "alert", id: "form-error" });
  const check = h("p", { class: "dry-run", id: "dry-run", "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary", id: "submit-job" }, "Create job");
  // body is the create request; upload(file) gives a local file's URL.
  const body = async (upload) => {
    const inputFiles = {};
    for (const row of inputsBox.querySelectorAll(".input-row")) {
      const name = $(".in-name", row).value.trim();
      const url = $(".in-url", row).value.trim();
      const file = $(".in-file", row).files[0];
      if (!url && !file) continue; // an empty row
      inputFiles[name] = file ? await upload(file, name) : url;
    }
    const b = {
      input_files: inputFiles,
      output_files: outputs.value.split(/[\s,]+/).filter(Boolean),
      ffmpeg_commands: commands.value.split("\n").map((s) => s.trim()).filter(Boolean),
    };
    if (machine.value.trim()) b.machine = machine.value.trim();
    if (timeout.value) b.timeout_seconds = parseInt(timeout.value, 10);
    if (webhook.value.trim()) b.webhook_url = webhook.value.trim();
    if (parallel.checked) {
      b.parallel = {};
      if (chunkSeconds.value) b.parallel.chunk_seconds = parseFloat(chunkSeconds.value);
      if (maxWorkers.value) b.parallel.max_workers = parseInt(maxWorkers.value, 10);
      if (fallback.checked) b.parallel.fallback = true;
    }
    return b;
  };
  const clearErrors = () => {
    for (const e of Object.values(errs)) e.textContent = "";
    for (const e of form.querySelectorAll(".in-error")) e.textContent = "";
    formError.textContent = "";
  };
  // The API names the field at fault: shown next to it.
  const showErrors = (e) => {
    formError.textContent = e.message;
    for (const [field, msg] of Object.entries(e.details || {})) {
      const key = field.replace(/\[\d+\]$/, "");
      if (key.startsWith("input_files.")) {
        const name = key.slice("input_files.".length);
        const row = [...inputsBox.querySelectorAll(".input-row")].find((r) => $(".in-name", r).value.trim() === name);
        if (row) { $(".in-error", row).textContent = msg; continue; }
      }
      const target = errs[key] || errs[field];
      if (target) target.textContent = (target.textContent ? target.textContent + " " : "") + (field !== key ? field + ": " : "") + msg;
    }
  };
  // Checked as the user types: a dry run (nothing stored, local files not
  // uploaded), a moment after the last keystroke; only the latest answer shows.
  let checkTimer = 0, checkSeq = 0;
  const checkSoon = () => {
    clearTimeout(checkTimer);
    checkTimer = setTimeout(async () => {
      const seq = ++checkSeq;
      try {
        const b = await body(async (file, name) => `${location.origin}/files/dry-run/${encodeURIComponent(name)}`);
        const r = await api("POST", "/api/ffmpeg?dry_run=true", b);
        if (seq !== checkSeq) return;
        clearErrors();
        const p = r.data.placement;
        check.className = "dry-run ok";
        const pr = r.data.parallel;
        check.textContent = `Looks good: runs on ${p.machine} (${p.driver}) ` +
          (pr && pr.mode === "chunked" ? `in chunks of about ${pr.chunk_seconds} s, at most ${pr.max_workers} at once (steps ${pr.steps.map((s) => s.name).join(", ")}), the command ` :
            pr ? `as one job, not in chunks (${pr.reason}), ` : "") +
          "as " + r.data.commands.map((c) => c.argv.join(" ")).join("; then ");
      } catch (e) {
        if (seq !== checkSeq) return;
        clearErrors();
        if (e.status === 401 || e.status === 429) { check.textContent = ""; return; } // not the job's fault
        showErrors(e);
        check.className = "dry-run bad";
        check.textContent = "Not yet: " + e.message;
      }
    }, 400);
  };
  const form = h("form", { id: "new-job", novalidate: true, oninput: checkSoon, onchange: checkSoon, onsubmit: async (ev) => {
    ev.preventDefault();
    clearTimeout(checkTimer);
    checkSeq++; // a check still in flight is stale now
    clearErrors();
    check.textContent = "";
    submit.disabled = true;
    try {
      const b = await body(async (file) => {
        say(`uploading ${file.name}`);
        submit.textContent = `Uploading ${file.name}…`;
        const t = (await api("POST", "/api/tmp-file")).data;
        const put = await fetch(t.upload_url, { method: "PUT", body: file });
        if (!put.ok) throw new Error(`upload of ${file.name} failed: HTTP ${put.status}`);
        return t.download_url;
      });
      submit.textContent = "Creating…";
      const r = await api("POST", "/api/ffmpeg", b);
      location.hash = "#/jobs/" + encodeURIComponent(r.data.id);
    } catch (e) {
      showErrors(e);
      say("the job was not created: " + e.message);
    } finally {
      submit.disabled = false;
      submit.textContent = "Create job";
    }
  } },
    h("h2", {}, "Inputs"), inputsBox, h("button", { type: "button", onclick: addInput }, "Add an input"), fieldError("input_files"),
    h("label", { for: "outputs-field" }, "Output file names (comma or space separated)"), outputs, fieldError("output_files"),
    h("label", { for: "commands-field" }, "ffmpeg commands, one per line (without “ffmpeg”; refer to files as {{name}})"), commands, fieldError("ffmpeg_commands"),
    h("div", { class: "row" },
      h("div", {}, h("label", { for: "machine-field" }, "Machine"), machine, fieldError("machine")),
      h("div", {}, h("label", { for: "timeout-field" }, "Timeout (seconds)"), timeout, fieldError("timeout_seconds"))),
    h("label", { for: "webhook-field" }, "Webhook URL (optional)"), webhook, fieldError("webhook_url"),
    parallelBox,
    check, h("p", {}, submit), formError);
  main().replaceChildren(h("h1", {}, "New job"), form);
  checkSoon();
}

// ---- keys ----

async function showKeys() {
  const [keys] = await Promise.all([api("GET", "/api/keys")]);
  const shown = h("div", { id: "shown-secret" });
  const showSecret = (title, secret) => {
    const code = h("code", { id: "new-secret" }, secret);
    shown.replaceChildren(h("div", { class: "notice", role: "alert" },
      h("p", {}, h("strong", {}, title), " It is shown only now: copy it and keep it safe; it cannot be shown again."),
      h("div", { class: "secret" }, code, h("button", { type: "button", id: "copy-secret", onclick: async () => {
        try { await navigator.clipboard.writeText(secret); say("copied"); } catch (e) { window.getSelection().selectAllChildren(code); say("select and copy the secret"); }
      } }, "Copy"))));
  };
  const rows = keys.data.map((k) => h("tr", { "data-key": k.id },
    h("td", {}, k.name), h("td", { class: "mono" }, k.prefix + "…"), h("td", { class: "hide-narrow" }, fmtTime(k.created_at)), h("td", {}, k.last_used_at ? fmtTime(k.last_used_at) : "never"),
    h("td", {}, h("button", { type: "button", class: "danger revoke", "aria-label": `Revoke key ${k.name} (${k.prefix}…)`, onclick: async () => {
      if (!confirm(`Revoke the key "${k.name}" (${k.prefix}…)? Requests with it will fail.`)) return;
      try { await api("DELETE", "/api/keys/" + encodeURIComponent(k.id)); say("key revoked"); route(); } catch (e) { alert(e.message); }
    } }, "Revoke"))));
  const name = h("input", { id: "key-name", required: true, maxlength: 100, placeholder: "e.g. laptop, CI" });
  const createErr = h("p", { class: "field-error", role: "alert" });
  const create = h("form", { id: "create-key", onsubmit: async (ev) => {
    ev.preventDefault();
    createErr.textContent = "";
    try {
      const r = await api("POST", "/api/keys", { name: name.value.trim() || "key" });
      state.flash = { title: `New API key "${r.data.name}".`, secret: r.data.secret };
      await route(); // the list with the new key, and its secret once
    } catch (e) { createErr.textContent = e.message; }
  } }, h("label", { for: "key-name" }, "Name of a new key"), h("div", { class: "row" }, name, h("button", { type: "submit", class: "primary" }, "Create key")), createErr);
  const webhook = h("div", { class: "row" },
    h("button", { type: "button", id: "webhook-secret-create", onclick: async () => {
      if (!confirm("Create (or rotate) the webhook signing secret? Receivers must switch to the new one.")) return;
      try { showSecret("Webhook signing secret.", (await api("POST", "/api/webhook-secret")).data.secret); } catch (e) { alert(e.message); }
    } }, "Create or rotate the webhook secret"),
    h("button", { type: "button", class: "danger", onclick: async () => {
      if (!confirm("Turn webhook signing off? Webhooks will be sent unsigned.")) return;
      try { await api("DELETE", "/api/webhook-secret"); say("webhook signing turned off"); shown.replaceChildren(h("p", { role: "status" }, "Webhook signing is off.")); } catch (e) { alert(e.message); }
    } }, "Turn signing off"));
  main().replaceChildren(
    h("h1", {}, "API keys"), shown,
    h("table", { id: "keys" }, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Key"), h("th", { class: "hide-narrow" }, "Created"), h("th", {}, "Last used"), h("th", {}, h("span", { class: "visually-hidden" }, "Actions")))), h("tbody", {}, rows)),
    h("p", { class: "muted" }, "The account's last key cannot be revoked: create another first."),
    create,
    h("h2", {}, "Webhook signing"),
    h("p", { class: "muted" }, "With a secret, every webhook carries X-Mediajobs-Signature: v1=HMAC-SHA256 of \"<timestamp>.<body>\"."),
    webhook);
  if (state.flash) {
    showSecret(state.flash.title, state.flash.secret);
    state.flash = null;
    $("#copy-secret").focus();
  }
}

// ---- usage ----

// svg builds an SVG element, as h builds HTML ones (text stays text).
function svg(tag, attrs = {}, ...kids) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const kid of kids.flat()) if (kid !== undefined && kid !== null) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}

function fmtSeconds(s) { return s >= 3600 ? (s / 3600).toFixed(2) + " h" : s.toFixed(s < 10 ? 3 : 1) + " s"; }

// usageChart draws CPU and GPU seconds per day of the range, pools summed: one
// bar per day, drawn here (no chart library, nothing fetched).
function usageChart(r) {
  const days = [];
  for (let d = new Date(r.from + "T00:00:00Z"); d <= new Date(r.to + "T00:00:00Z"); d.setUTCDate(d.getUTCDate() + 1)) days.push(d.toISOString().slice(0, 10));
  const per = {};
  for (const u of r.days) {
    const p = per[u.date] || (per[u.date] = { cpu: 0, gpu: 0, jobs: 0 });
    p.cpu += u.cpu_seconds; p.gpu += u.gpu_seconds; p.jobs += u.jobs;
  }
  const top = Math.max(0.001, ...days.map((d) => per[d] ? per[d].cpu + per[d].gpu : 0));
  const W = 720, H = 180, pad = 24, bw = Math.min(48, (W - 2 * pad) / days.length);
  const bars = days.flatMap((d, i) => {
    const p = per[d] || { cpu: 0, gpu: 0, jobs: 0 };
    const x = pad + i * bw, hc = (p.cpu / top) * (H - 2 * pad), hg = (p.gpu / top) * (H - 2 * pad);
    return [
      svg("rect", { class: "bar cpu", x: x.toFixed(1), y: (H - pad - hc).toFixed(1), width: Math.max(1, bw - 2).toFixed(1), height: hc.toFixed(1), "data-date": d, "data-cpu": p.cpu },
        svg("title", {}, `${d}: ${fmtSeconds(p.cpu)} CPU, ${fmtSeconds(p.gpu)} GPU, ${p.jobs} jobs`)),
      p.gpu ? svg("rect", { class: "bar gpu", x: x.toFixed(1), y: (H - pad - hc - hg).toFixed(1), width: Math.max(1, bw - 2).toFixed(1), height: hg.toFixed(1), "data-date": d, "data-gpu": p.gpu }) : null,
    ];
  });
  return svg("svg", { id: "usage-chart", class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `CPU and GPU seconds per day, ${r.from} to ${r.to}; the table below has the figures` },
    svg("line", { class: "axis", x1: pad, y1: H - pad, x2: W - pad, y2: H - pad }),
    svg("text", { class: "label", x: pad, y: 14 }, fmtSeconds(top)),
    svg("text", { class: "label", x: pad, y: H - 6 }, r.from),
    svg("text", { class: "label", x: W - pad, y: H - 6, "text-anchor": "end" }, r.to),
    bars);
}

// limitsTable shows the account's limits beside what it holds now (GET /api/account).
function limitsTable(a) {
  const rows = [
    ["max_running_per_account", "Jobs running at once, per pool", null, (v) => String(v)],
    ["max_queued_jobs", "Jobs queued", "queued_jobs", (v) => String(v)],
    ["max_job_bytes", "Job records held", "job_bytes", fmtBytes],
    ["max_storage_bytes", "Files held (temporary files and outputs)", "storage_bytes", fmtBytes],
    ["max_event_streams", "Event streams open", "event_streams", (v) => String(v)],
    ["max_timeout_seconds", "Longest timeout_seconds", null, fmtSeconds],
    ["max_input_bytes", "Input bytes per job", null, fmtBytes],
  ];
  return h("table", { id: "limits" },
    h("thead", {}, h("tr", {}, h("th", {}, "Limit"), h("th", {}, "Yours"), h("th", {}, "In use"))),
    h("tbody", {}, rows.map(([key, label, use, fmt]) => {
      const v = a.limits[key];
      return h("tr", { dataset: { limit: key } }, h("td", {}, label, " ", h("code", { class: "hide-narrow" }, key)),
        h("td", {}, v ? fmt(v) : "no limit"), h("td", {}, use ? fmt(a.usage[use] || 0) : ""));
    })));
}

async function showUsage(params) {
  const q = new URLSearchParams();
  for (const k of ["from", "to"]) if (params.get(k)) q.set(k, params.get(k));
  const [r, account] = await Promise.all([api("GET", "/api/usage" + (q.toString() ? "?" + q : "")).then((x) => x.data),
    api("GET", "/api/account").then((x) => x.data)]);
  const from = h("input", { id: "usage-from", type: "date", value: r.from, required: true });
  const to = h("input", { id: "usage-to", type: "date", value: r.to, required: true });
  const form = h("form", { id: "usage-range", onsubmit: (ev) => { ev.preventDefault(); location.hash = "#/usage?" + new URLSearchParams({ from: from.value, to: to.value }); } },
    h("div", { class: "row" }, h("div", {}, h("label", { for: "usage-from" }, "From"), from), h("div", {}, h("label", { for: "usage-to" }, "To (UTC days)"), to),
      h("div", {}, h("button", { type: "submit" }, "Show"))));
  const cells = (u) => [h("td", {}, String(u.jobs)), h("td", {}, fmtSeconds(u.cpu_seconds)), h("td", { class: "hide-narrow" }, fmtSeconds(u.wall_seconds)),
    h("td", {}, fmtSeconds(u.gpu_seconds)), h("td", { class: "hide-narrow" }, fmtBytes(u.input_bytes)), h("td", { class: "hide-narrow" }, fmtBytes(u.output_bytes))];
  const data = (u) => ({ jobs: u.jobs, cpu: u.cpu_seconds, wall: u.wall_seconds, gpu: u.gpu_seconds, input: u.input_bytes, output: u.output_bytes });
  const rows = r.days.slice().reverse().map((u) => h("tr", { dataset: { date: u.date, pool: u.pool, ...data(u) } }, h("td", {}, u.date), h("td", {}, u.pool), cells(u)));
  const total = h("tr", { id: "usage-total", dataset: data(r.total) }, h("th", { scope: "row", colspan: 2 }, "Total"), cells(r.total));
  main().replaceChildren(
    h("h1", {}, "Usage"),
    h("p", { class: "muted" }, "What your jobs consumed, per UTC day (the day each job finished) and pool: the CPU and wall time of their ffmpeg processes, GPU time on GPU pools, and bytes. A job counts once, with the attempt whose result ended it."),
    form, usageChart(r),
    h("table", { id: "usage" }, h("thead", {}, h("tr", {}, ["Date", "Pool", "Jobs", "CPU", "Wall", "GPU", "Input", "Output"].map((c, i) => h("th", { class: [4, 6, 7].includes(i) ? "hide-narrow" : null }, c)))),
      h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No jobs in this range."))), h("tfoot", {}, total)),
    h("h2", {}, "Limits"),
    h("p", { class: "muted" }, `What your account may hold at once (set by the operator). A create that would cross one is refused with 429 quotaExceeded; jobs over the running limit wait in the queue. Fair-share weight: ${account.weight}.`),
    limitsTable(account));
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  $("#signout").addEventListener("click", signOut);
  $("#skip").addEventListener("click", () => main().focus());
  route();
});
