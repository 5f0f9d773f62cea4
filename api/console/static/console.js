// ragstream console: vanilla JavaScript over the public HTTP API, no dependencies.
// The API key lives in sessionStorage (this tab only) and goes out as a Bearer token.
"use strict";

const KEY = "ragstream.key";
const ROLE = "ragstream.role";
const TENANT = "ragstream.tenant";
const PAGES = ["ask", "search", "kb", "ops"];
// Earlier turns a follow-up carries, and the characters kept of each: the rewrite the
// OpenAI-compatible route applies to its messages (api/routes/openai_compat.py).
const MAX_HISTORY = 20; // QueryBody.history's limit
const CONTEXT_MARKER = " | context: "; // workers.conversation.CONTEXT_MARKER
const ARCHIVE = /\.(zip|tar|tar\.gz|tgz)$/i;

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
};
const fmt = (n, digits = 0) => (n === null || n === undefined ? "—" : Number(n).toFixed(digits));
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
const unixWhen = (s) => (s ? new Date(s * 1000).toLocaleTimeString() : "—");

// -- the API ------------------------------------------------------------------------------

class ApiFailure extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  headers.Authorization = `Bearer ${sessionStorage.getItem(KEY) || ""}`;
  const response = await fetch(path, Object.assign({}, options, { headers }));
  let body = null;
  const type = response.headers.get("content-type") || "";
  if (type.includes("json")) body = await response.json();
  if (!response.ok) throw new ApiFailure(response.status, body);
  return body;
}

// Server-Sent Events of POST /v1/query (EventSource cannot POST): call onEvent(name, data)
// for each event; ": ping" comments are skipped.
async function streamQuery(body, onEvent) {
  const response = await fetch("/v1/query", {
    method: "POST",
    headers: {
      Authorization: `Bearer ${sessionStorage.getItem(KEY) || ""}`,
      "Content-Type": "application/json",
      Accept: "text/event-stream",
    },
    body: JSON.stringify(Object.assign({ stream: true }, body)),
  });
  if (!response.ok) {
    const type = response.headers.get("content-type") || "";
    throw new ApiFailure(response.status, type.includes("json") ? await response.json() : null);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
    }
  }
}

// -- pages --------------------------------------------------------------------------------

let timers = [];
function every(ms, fn) {
  fn();
  timers.push(setInterval(fn, ms));
}

function currentPage() {
  const part = location.pathname.replace(/^\/console\/?/, "").replace(/\/$/, "");
  return PAGES.includes(part) ? part : "ask";
}

function show(page) {
  timers.forEach(clearInterval);
  timers = [];
  for (const section of document.querySelectorAll(".page")) section.hidden = true;
  const signedIn = Boolean(sessionStorage.getItem(KEY));
  $("#nav").hidden = !signedIn;
  $("#signout").hidden = !signedIn;
  $("#who").textContent = signedIn
    ? `tenant ${sessionStorage.getItem(TENANT)} · ${sessionStorage.getItem(ROLE)} key`
    : "";
  if (!signedIn) {
    $("#signin-page").hidden = false;
    return;
  }
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("active", a.dataset.page === page);
  }
  $(`#${page}-page`).hidden = false;
  ({ ask: openAsk, search: openSearch, kb: openKb, ops: openOps })[page]();
}

function go(path) {
  history.pushState(null, "", path);
  show(currentPage());
}

async function signIn(event) {
  event.preventDefault();
  const key = $("#key").value.trim();
  sessionStorage.setItem(KEY, key);
  try {
    const me = await api("/v1/me");
    sessionStorage.setItem(ROLE, me.role);
    sessionStorage.setItem(TENANT, me.tenant);
    $("#signin-error").hidden = true;
    $("#key").value = "";
    show(currentPage());
  } catch (err) {
    sessionStorage.removeItem(KEY);
    $("#signin-error").textContent = `Sign-in failed: ${err.message}`;
    $("#signin-error").hidden = false;
  }
}

function signOut() {
  sessionStorage.clear();
  show(currentPage());
}

// -- Ask ----------------------------------------------------------------------------------

let conversation = []; // [{question, answer}] of the answered turns
let historyCursor = null;

function openAsk() {
  loadHistory(true);
}

// The earlier turns of the conversation ({question, answer}): the pipeline makes a follow-up
// standalone from the questions and never answers it with the last answer again
// (workers/conversation.py).
function earlierTurns() {
  return conversation.slice(-MAX_HISTORY).map((t) => ({ question: t.question, answer: (t.answer || "").slice(0, 8000) }));
}

// A logged query as the reader typed it: `question` (GET /v1/queries); `query` is the question
// answered, a follow-up made standalone with its context (logs from before `question` only
// have that one: its part before the context is shown).
function askedText(q) {
  return q.question || q.query.split(CONTEXT_MARKER)[0];
}

function isRefusal(result) {
  if (result.refused === true || result.outcome === "refused") return true;
  return (
    result.status === "answered" &&
    !(result.citations || []).length &&
    !(result.evidence || []).length
  );
}

// The answer text with each [n] of a cited passage as a link that opens the passage.
function answerNodes(text, result) {
  const cited = new Map((result.citations || []).map((c) => [c.n, c]));
  const nodes = [];
  let at = 0;
  for (const m of text.matchAll(/\[(\d+)\]/g)) {
    const n = Number(m[1]);
    if (!cited.has(n)) continue;
    nodes.push(document.createTextNode(text.slice(at, m.index)));
    nodes.push(
      el("a", {
        class: "cite", href: "#", "data-n": n, text: `[${n}]`,
        onclick: (e) => { e.preventDefault(); openPassage(result, n); },
      })
    );
    at = m.index + m[0].length;
  }
  nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

function evidenceList(spans, result) {
  return el(
    "ul", { class: "evidence" },
    ...spans.map((s) =>
      el("li", {},
        el("a", {
          class: "cite", href: "#", "data-n": s.n, text: `[${s.n}]`,
          onclick: (e) => { e.preventDefault(); openPassage(result, s.n); },
        }),
        ` “${s.text}” `,
        el("span", { class: "muted small", text: s.title || s.doc_id }))
    )
  );
}

function traceTable(trace) {
  if (!trace || !trace.length) return el("span");
  return el(
    "table", { class: "trace" },
    el("tr", {}, el("th", { text: "stage" }), el("th", { text: "ms" }), el("th", { text: "waited ms" })),
    ...trace.map((t) =>
      el("tr", {}, el("td", { text: t.stage }), el("td", { text: fmt(t.duration_ms, 1) }),
        el("td", { text: t.wait_ms === null || t.wait_ms === undefined ? "" : fmt(t.wait_ms, 1) }))
    )
  );
}

function renderResult(turn, result) {
  turn.result = result;
  const box = turn.node.querySelector(".body");
  box.replaceChildren();
  if (result.status === "failed") {
    const err = result.error || {};
    box.append(el("div", { class: "failure", text: `Failed (${err.code || "error"}): ${err.message || ""}` }));
  } else if (result.status === "pending") {
    box.append(el("div", { class: "muted", text: "Still pending: reopen it later." }));
  } else if (isRefusal(result)) {
    box.append(el("div", { class: "refusal" }, el("strong", { text: "Refused: " }), result.answer || "The documents do not contain the answer."));
  } else {
    if ((result.evidence || []).length) box.append(evidenceList(result.evidence, result));
    box.append(el("div", { class: "answer" }, ...answerNodes(result.answer || "", result)));
  }
  // The latest answer shows its per-stage trace; earlier ones fold theirs away.
  for (const open of document.querySelectorAll("#conversation details[open]")) open.open = false;
  const trace = el("details", { open: true }, el("summary", { text: "per-stage trace" }), traceTable(result.trace));
  box.append(
    el("div", { class: "meta" },
      el("span", { class: "badge tier", text: `tier ${result.tier || "—"}` }),
      el("span", { class: "latency", text: `latency ${fmt(result.latency_ms)} ms` }),
      result.cached ? el("span", { class: "badge", text: "cached" }) : "",
      result.truncated ? el("span", { class: "badge", text: "truncated" }) : "",
      el("span", { class: "muted", text: result.request_id })),
    result.status === "pending" ? "" : feedbackBar(result),
    trace
  );
}

// Helpful or not (POST /v1/queries/{id}/feedback): this key's latest word on the answer, which
// training reads (workers/feedback.py). A reopened answer shows what was given before.
function feedbackBar(result) {
  const mine = (result.feedback || []).find((f) => f.mine);
  const state = el("span", { class: "feedback-state muted", text: mine ? feedbackText(mine) : "" });
  const send = async (helpful) => {
    state.textContent = "sending...";
    // A streamed answer reaches the query log a moment after the stream (the delivery pool
    // records it): while the log still says pending (409), ask again a few times.
    for (let attempt = 0; ; attempt++) {
      try {
        const given = await api(`/v1/queries/${encodeURIComponent(result.request_id)}/feedback`, {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ helpful }),
        });
        state.textContent = feedbackText(given);
        loadHistory(true);
        return;
      } catch (err) {
        if (err.status === 409 && attempt < 5) { await new Promise((r) => setTimeout(r, 1000)); continue; }
        state.textContent = `Feedback not stored: ${err.message}`;
        return;
      }
    }
  };
  return el("div", { class: "feedback" },
    el("span", { class: "muted", text: "Helpful?" }),
    el("button", { type: "button", class: "feedback-yes", text: "Yes", onclick: () => send(true) }),
    el("button", { type: "button", class: "feedback-no", text: "No", onclick: () => send(false) }),
    state);
}

function feedbackText(f) {
  return `you said: ${f.helpful ? "helpful" : "not helpful"}${f.passage ? ` ([${f.passage}])` : ""}`;
}

// The feedback tally of a logged query (GET /v1/queries) as a badge; none without feedback.
function feedbackBadge(tally) {
  if (!tally || !(tally.helpful || tally.not_helpful)) return "";
  return el("span", { class: "badge feedback-badge", title: "feedback: helpful / not helpful",
    text: `helpful ${tally.helpful} · not ${tally.not_helpful}` });
}

function newTurn(question) {
  const node = el("div", { class: "turn" }, el("div", { class: "q", text: question }), el("div", { class: "body" }));
  $("#conversation").append(node);
  return { question, node, result: null };
}

async function ask(event) {
  event.preventDefault();
  const question = $("#question").value.trim();
  const state = $("#ask-state");
  state.classList.remove("error");
  if (!question) { // spaces only: say so, send nothing
    state.textContent = "Type a question first: it is empty (only spaces).";
    state.classList.add("error");
    $("#question").focus();
    return;
  }
  const turn = newTurn(question);
  const body = turn.node.querySelector(".body");
  const live = el("div", { class: "answer streaming" });
  const started = performance.now();
  let evidence = [];
  $("#ask").disabled = true;
  state.textContent = "sending...";
  try {
    let final = null;
    await streamQuery({ query: question, history: earlierTurns(), route: $("#route").value }, (name, data) => {
      if (name === "accepted") state.textContent = "accepted";
      else if (name === "queued") state.textContent = `queued (${data.backlog} ahead in ${data.pool || "the pools"})`;
      else if (name === "evidence") {
        evidence = data.evidence || [];
        body.prepend(evidenceList(evidence, { evidence, citations: evidence.map((s) => ({ n: s.n, doc_id: s.doc_id, chunk_id: s.chunk_id, title: s.title, source: s.source })) }));
        state.textContent = `evidence after ${fmt(performance.now() - started)} ms`;
      } else if (name === "token") {
        if (!live.isConnected) body.append(live);
        live.textContent += data.text;
        state.textContent = "generating...";
      } else if (name === "replace") live.textContent = data.text; // the check changed the text
      else if (name === "answer" || name === "error") final = data;
      else if (name === "timeout") final = { request_id: data.request_id, status: "pending" };
    });
    if (final) renderResult(turn, final);
    if (final && final.status === "answered") conversation.push({ question, answer: final.answer || "" });
    state.textContent = "";
    $("#question").value = "";
    loadHistory(true);
    setTimeout(() => loadHistory(true), 2000); // once the delivery pool logged the answer
  } catch (err) {
    body.append(el("div", { class: "failure", text: `Failed: ${err.message}` }));
    state.textContent = "";
  } finally {
    $("#ask").disabled = false;
  }
}

async function openPassage(result, n) {
  const citation = (result.citations || []).find((c) => c.n === n) ||
    (result.evidence || []).find((s) => s.n === n);
  if (!citation) return;
  const panel = $("#passage");
  panel.hidden = false;
  $("#passage-title").textContent = `[${n}] ${citation.title || citation.doc_id}`;
  $("#passage-meta").textContent = "loading...";
  const text = $("#passage-text");
  text.replaceChildren();
  try {
    // A passage read with the part of the chunk before it (context expansion) has spans quoted
    // from that chunk too: both chunks are shown, in document order.
    const ids = [...new Set([citation.chunk_id,
      ...(result.evidence || []).filter((s) => s.n === n).map((s) => s.chunk_id)])];
    const chunks = (await Promise.all(ids.map((id) => api(`/v1/chunks/${encodeURIComponent(id)}`))))
      .sort((a, b) => a.chunk_no - b.chunk_no);
    chunks.forEach((chunk, i) => {
      if (i > 0) text.append(el("hr", { class: "chunk-break" }));
      const spans = (result.evidence || [])
        .filter((s) => s.chunk_id === chunk.chunk_id)
        .map((s) => [s.start, s.end])
        .sort((a, b) => a[0] - b[0]);
      let at = 0;
      for (const [start, end] of spans) {
        if (start < at || end > chunk.text.length || end <= start) continue;
        text.append(chunk.text.slice(at, start), el("mark", { class: "evidence-span", text: chunk.text.slice(start, end) }));
        at = end;
      }
      text.append(chunk.text.slice(at));
    });
    const mark = text.querySelector("mark");
    if (mark) mark.scrollIntoView({ block: "center" });
    const chunk = chunks.find((c) => c.chunk_id === citation.chunk_id) || chunks[0];
    const numbers = chunks.map((c) => c.chunk_no).join(", ");
    $("#passage-meta").textContent = `${chunk.doc_id} · chunk${chunks.length > 1 ? "s" : ""} ${numbers} · version ${chunk.version}${chunk.source ? " · " + chunk.source : ""}`;
    const link = $("#passage-doc");
    link.href = /^https?:\/\//.test(chunk.source) ? chunk.source : `/console/kb?doc=${encodeURIComponent(chunk.doc_id)}`;
    link.onclick = link.href.includes("/console/kb") ? (e) => { e.preventDefault(); go(link.getAttribute("href")); } : null;
  } catch (err) {
    $("#passage-meta").textContent = `Could not load the passage: ${err.message}`;
  }
}

async function loadHistory(first) {
  if (first) historyCursor = null;
  try {
    const page = await api(`/v1/queries?limit=15${historyCursor ? "&cursor=" + encodeURIComponent(historyCursor) : ""}`);
    const list = $("#history");
    if (first) list.replaceChildren();
    for (const q of page.items) {
      list.append(el("li", {},
        el("a", { href: "#", "data-request": q.request_id, text: askedText(q),
          onclick: (e) => { e.preventDefault(); reopen(q.request_id, askedText(q)); } }),
        el("div", { class: "muted small" },
          `${q.status}${q.tier ? " · " + q.tier : ""} · ${when(q.created_at)} `,
          feedbackBadge(q.feedback))));
    }
    historyCursor = page.next_cursor;
    $("#history-more").hidden = !historyCursor;
  } catch (err) {
    $("#history").replaceChildren(el("li", { class: "error", text: err.message }));
  }
}

async function reopen(requestId, question) {
  const turn = newTurn(question);
  try {
    renderResult(turn, await api(`/v1/queries/${encodeURIComponent(requestId)}`));
    turn.node.scrollIntoView();
  } catch (err) {
    turn.node.querySelector(".body").append(el("div", { class: "failure", text: err.message }));
  }
}

// -- Knowledge base -----------------------------------------------------------------------

let docCursor = null;

// -- search: passages without an answer (POST /v1/search) ---------------------------------

function openSearch() {
  $("#search-query").focus();
}

// Words too common to mark in a passage.
const UNMARKED = new Set(("a an and are be by can do does for from how in is it of on or that the "
  + "this to what when where which who why with").split(" "));

// The words of a query worth marking: letters and digits, two or more, lower-cased, unique,
// none of UNMARKED.
function queryWords(query) {
  const words = (query.toLowerCase().match(/[\p{L}\p{N}_]{2,}/gu) || []);
  return [...new Set(words)].filter((w) => !UNMARKED.has(w));
}

// `text` as text nodes with each occurrence of one of `words` (case-insensitive) in a <mark>:
// the passage is never parsed as HTML.
function highlighted(text, words) {
  if (!words.length) return [document.createTextNode(text)];
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}_])(${escaped.join("|")})(?![\\p{L}\\p{N}_])`, "giu");
  const nodes = [];
  let at = 0;
  for (const m of text.matchAll(pattern)) {
    nodes.push(document.createTextNode(text.slice(at, m.index)));
    nodes.push(el("mark", { text: m[0] }));
    at = m.index + m[0].length;
  }
  nodes.push(document.createTextNode(text.slice(at)));
  return nodes;
}

function searchHit(hit, words) {
  return el(
    "li", { class: "search-hit", "data-chunk": hit.chunk_id },
    el("div", { class: "row" },
      el("strong", { class: "hit-title", text: hit.title || hit.doc_id }),
      el("span", { class: "muted small hit-score", text: `score ${fmt(hit.score, 4)}` })),
    el("div", { class: "muted small hit-source", text: hit.source || hit.doc_id }),
    el("div", { class: "passage-text hit-text" }, ...highlighted(hit.text || "", words))
  );
}

async function search(event) {
  event.preventDefault();
  const query = $("#search-query").value.trim();
  const state = $("#search-state");
  state.classList.remove("error");
  if (!query) {
    state.textContent = "The search is empty: type a few words.";
    state.classList.add("error");
    return;
  }
  state.textContent = "searching...";
  const t0 = performance.now();
  try {
    const body = {
      query, ranker: $("#search-ranker").value, top_k: Number($("#search-top-k").value),
    };
    const found = await api("/v1/search", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const words = queryWords(query);
    $("#search-results").replaceChildren(...found.data.map((hit) => searchHit(hit, words)));
    state.textContent = `${found.data.length} passages, ${fmt(performance.now() - t0)} ms`;
  } catch (err) {
    state.textContent = err.message;
    state.classList.add("error");
  }
}

function openKb() {
  const doc = new URLSearchParams(location.search).get("doc");
  if (doc) showDocument(doc);
  else $("#doc-detail").hidden = true;
  loadDocuments(true);
  every(2000, () => { loadJobs(); refreshUploads(); });
}

async function showDocument(docId) {
  const panel = $("#doc-detail");
  panel.hidden = false;
  try {
    const d = await api(`/v1/documents/${encodeURIComponent(docId)}`);
    panel.replaceChildren(el("strong", { text: d.title || d.doc_id }),
      el("dl", {},
        el("dt", { text: "document" }), el("dd", { text: d.doc_id }),
        el("dt", { text: "status" }), el("dd", { class: `status-${d.status}`, text: d.status }),
        el("dt", { text: "version" }), el("dd", { text: d.version }),
        el("dt", { text: "chunks" }), el("dd", { text: d.chunk_count }),
        el("dt", { text: "source" }), el("dd", { text: d.source || "—" }),
        el("dt", { text: "updated" }), el("dd", { text: when(d.updated_at) })));
  } catch (err) {
    panel.replaceChildren(el("span", { class: "error", text: err.message }));
  }
}

async function loadDocuments(first) {
  if (first) docCursor = null;
  const params = new URLSearchParams({ limit: "25" });
  if ($("#doc-status").value) params.set("status", $("#doc-status").value);
  if ($("#doc-source").value.trim()) params.set("source", $("#doc-source").value.trim());
  if (docCursor) params.set("cursor", docCursor);
  try {
    const page = await api(`/v1/documents?${params}`);
    const rows = page.items.map((d) =>
      el("tr", { "data-doc": d.doc_id },
        el("td", {}, el("a", { href: `/console/kb?doc=${encodeURIComponent(d.doc_id)}`, text: d.doc_id,
          onclick: (e) => { e.preventDefault(); go(`/console/kb?doc=${encodeURIComponent(d.doc_id)}`); } })),
        el("td", { text: d.title || "" }),
        el("td", { class: `status status-${d.status}`, text: d.status, title: d.error || "" }),
        el("td", { text: d.version }), el("td", { text: d.chunk_count }),
        el("td", { text: when(d.updated_at) }),
        el("td", {}, d.status === "deleted" ? "" : el("button", { type: "button", class: "delete", text: "Delete",
          onclick: () => deleteDocument(d.doc_id) }))));
    $("#documents tbody").replaceChildren(...rows);
    docCursor = page.next_cursor;
    $("#docs-next").hidden = !docCursor;
  } catch (err) {
    $("#documents tbody").replaceChildren(el("tr", {}, el("td", { class: "error", colspan: 7, text: err.message })));
  }
}

async function deleteDocument(docId) {
  if (!window.confirm(`Delete ${docId} and its chunks?`)) return;
  try {
    await api(`/v1/documents/${encodeURIComponent(docId)}`, { method: "DELETE" });
    setTimeout(() => loadDocuments(true), 1000);
  } catch (err) {
    window.alert(err.message);
  }
}

const uploads = []; // {name, kind, node, state, docId, jobId, after}

function addFiles(files) {
  for (const file of files) {
    const item = { name: file.name, kind: ARCHIVE.test(file.name) ? "archive" : "document", state: "uploading" };
    item.node = el("li", { "data-file": file.name });
    uploads.unshift(item);
    $("#uploads").prepend(item.node);
    renderUpload(item);
    upload(item, file);
  }
}

function renderUpload(item) {
  item.node.replaceChildren(
    el("strong", { text: item.name }), " ",
    el("span", { class: `upload-status status-${item.state}`, text: item.state }),
    item.detail ? el("span", { class: "muted small", text: ` ${item.detail}` }) : "");
}

async function upload(item, file) {
  const form = new FormData();
  form.append(item.kind === "archive" ? "archive" : "file", file, file.name);
  try {
    if (item.kind === "archive") {
      const job = await api("/v1/ingest/jobs", { method: "POST", body: form });
      item.jobId = job.job_id;
      item.state = "accepted";
      item.detail = `job ${job.job_id.slice(0, 8)}`;
      loadJobs();
    } else {
      item.after = new Date().toISOString();
      const accepted = await api("/v1/documents", { method: "POST", body: form });
      item.docId = accepted.doc_id;
      item.state = "accepted";
      item.detail = "waiting for the ingest pool";
    }
  } catch (err) {
    item.state = "failed";
    item.detail = err.message;
  }
  renderUpload(item);
}

// An accepted file is final once the registry row of its document was updated after the
// upload (indexed or failed), or its job finished. Read through the list endpoint, filtered
// by the file's source name (a missing document is an empty page, never a 404).
async function refreshUploads() {
  for (const item of uploads) {
    if (item.state !== "accepted" || !item.docId) continue;
    try {
      const page = await api(`/v1/documents?limit=5&source=${encodeURIComponent(item.name)}`);
      const row = page.items.find((d) => d.doc_id === item.docId);
      if (row && row.updated_at && Date.parse(row.updated_at) >= Date.parse(item.after) - 2000) {
        item.state = row.status;
        item.detail = `version ${row.version}, ${row.chunk_count} chunks${row.error ? " · " + row.error : ""}`;
        renderUpload(item);
        loadDocuments(true);
      }
    } catch (err) {
      item.detail = err.message;
      renderUpload(item);
    }
  }
}

async function loadJobs() {
  try {
    const page = await api("/v1/ingest/jobs?limit=10");
    const now = Date.now();
    const rows = page.items.map((j) => {
      const finished = j.done_documents + j.failed_documents;
      const pct = j.total_documents ? (100 * finished) / j.total_documents : 0;
      const began = j.started_at ? Date.parse(j.started_at) : null;
      const end = j.finished_at ? Date.parse(j.finished_at) : now;
      const rate = began && end > began ? finished / ((end - began) / 1000) : null;
      const left = j.total_documents - finished;
      const eta = !j.finished_at && rate ? `${Math.ceil(left / rate)} s` : "—";
      for (const item of uploads) {
        if (item.jobId === j.job_id && item.state === "accepted" && j.finished_at) {
          item.state = j.status;
          item.detail = `${j.done_documents}/${j.total_documents} documents`;
          renderUpload(item);
          loadDocuments(true);
        }
      }
      return el("tr", { "data-job": j.job_id },
        el("td", {}, el("code", { text: j.job_id.slice(0, 8) })),
        el("td", { class: `job-status status-${j.status}`, text: j.status }),
        el("td", {}, el("span", { class: "bar" }, el("span", { style: `width:${pct.toFixed(1)}%` })), ` ${pct.toFixed(0)}%`),
        el("td", { text: `${j.done_documents}/${j.total_documents}` }),
        el("td", { text: j.failed_documents }),
        el("td", { text: rate === null ? "—" : `${rate.toFixed(1)} docs/s` }),
        el("td", { text: eta }),
        el("td", { text: when(j.created_at) }),
        el("td", {}, j.failed_documents ? el("button", { type: "button", text: "Failures",
          onclick: () => showFailures(j.job_id) }) : ""));
    });
    $("#jobs tbody").replaceChildren(...rows);
  } catch (err) {
    $("#jobs tbody").replaceChildren(el("tr", {}, el("td", { class: "error", colspan: 9, text: err.message })));
  }
}

async function showFailures(jobId) {
  const panel = $("#job-failures");
  panel.hidden = false;
  try {
    const job = await api(`/v1/ingest/jobs/${encodeURIComponent(jobId)}`);
    panel.replaceChildren(
      el("div", { class: "panel-head" }, el("strong", { text: `Failed documents of job ${jobId.slice(0, 8)}` }),
        el("button", { type: "button", text: "Retry failed", onclick: async () => {
          try { await api(`/v1/ingest/jobs/${encodeURIComponent(jobId)}/retry`, { method: "POST" }); loadJobs(); }
          catch (err) { window.alert(err.message); } } })),
      el("table", {}, ...job.failures.map((f) => el("tr", {}, el("td", { text: f.path }), el("td", { class: "error", text: f.error })))));
  } catch (err) {
    panel.replaceChildren(el("span", { class: "error", text: err.message }));
  }
}

// -- Operations ---------------------------------------------------------------------------

function sparkline(points, index, width = 120, height = 26) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const values = points.map((p) => p[index]);
  if (values.length > 1) {
    const max = Math.max(...values, 1e-9);
    const step = width / (values.length - 1);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", index === 1 ? "#2f5bd3" : "#a15c00");
    line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`).join(" "));
    svg.append(line);
  }
  const title = document.createElementNS(ns, "title");
  title.textContent = index === 1 ? "events/s" : "lag";
  svg.append(title);
  return svg;
}

function openOps() {
  every(3000, loadOps);
}

async function loadOps() {
  let status;
  try {
    status = await api("/v1/ops/status");
  } catch (err) {
    $("#ops-body").hidden = err.status === 403;
    $("#ops-forbidden").hidden = false;
    $("#ops-forbidden").textContent = err.status === 403
      ? "403: the Operations page needs an operator key (ragstream keys create --role operator)."
      : `Could not load: ${err.message}`;
    return;
  }
  $("#ops-forbidden").hidden = true;
  $("#ops-body").hidden = false;
  const scope = status.scope === "tenant" ? `tenant ${status.tenant} only` : "all tenants";
  $("#ops-updated").textContent = `${scope} · updated ${unixWhen(status.collected_at)} · refreshed every 3 s`;
  $("#pools tbody").replaceChildren(...status.pools.map((p) =>
    el("tr", { "data-pool": p.name, title: p.error || "" },
      el("td", {}, el("strong", { text: p.name }), el("div", { class: "muted small", text: p.topic })),
      el("td", { class: "members", text: status.scope === "tenant" ? "—" : p.members }),
      el("td", { class: "lag", text: p.lag === null ? "—" : p.lag }),
      el("td", { class: "small", text: p.partitions.map((x) => `p${x.partition}: ${x.lag}`).join(" · ") || (p.error || "—") }),
      el("td", { text: `${fmt(p.batch_size_mean, 1)} (${p.max_batch})` }),
      el("td", { class: "p50p95", title: p.since_start ? "since the pool started" : `last ${fmt(p.window_s)} s`,
        text: `${fmt(p.batch_p50_ms, 1)} / ${fmt(p.batch_p95_ms, 1)}` }),
      el("td", { class: "throughput", text: fmt(p.throughput_per_s, 2) }),
      el("td", { text: `${fmt(p.errors)} (${fmt(p.errors_total)} total, ${fmt(p.dead_letters_total)} DLQ)` }),
      el("td", {}, sparkline(p.history, 1), sparkline(p.history, 2)))));
  const procs = status.processes;
  $("#processes-note").textContent = procs.error
    ? procs.error
    : `supervisor pid ${procs.supervisor_pid}, state written ${unixWhen(procs.updated_at)}`;
  $("#processes tbody").replaceChildren(...procs.processes.map((p) =>
    el("tr", { "data-process": p.name },
      el("td", { text: p.name }), el("td", { class: `status-${p.state}`, text: p.state }),
      el("td", { text: p.pid || "—" }), el("td", { text: p.restarts }),
      el("td", { text: p.last_exit_code === null ? "—" : p.last_exit_code }),
      el("td", { text: unixWhen(p.last_exit_at) }))));
  $("#dlq tbody").replaceChildren(...status.dlq.map((d) =>
    el("tr", { "data-dlq": d.topic },
      el("td", { text: d.topic }), el("td", { text: d.depth === null ? (d.error || "—") : d.depth }),
      el("td", {}, d.depth ? el("button", { type: "button", text: "Inspect", onclick: () => inspectDlq(d.topic) }) : "",
        d.depth ? el("button", { type: "button", text: "Replay", onclick: () => replayDlq(d.topic) }) : ""))));
  $("#llm").replaceChildren(...status.llm.map((l) =>
    el("li", { class: l.healthy ? "healthy" : "unhealthy" }, `${l.name}: ${l.healthy ? "healthy" : "down"} `,
      el("span", { class: "muted small", text: `${l.detail} (${fmt(l.latency_ms)} ms)` }))));
  const ix = status.index;
  $("#index").replaceChildren(
    el("dt", { text: "alias" }), el("dd", { text: ix.alias }),
    el("dt", { text: "physical index" }), el("dd", { text: ix.physical || "—" }),
    el("dt", { text: "model" }), el("dd", { text: `${ix.model_id || "—"} (${ix.dims || "?"} dims)` }),
    el("dt", { text: "configured model" }), el("dd", { text: ix.configured_model }),
    el("dt", { text: "chunks" }), el("dd", { text: ix.chunk_count === null ? (ix.error || "—") : ix.chunk_count }));
}

async function replayDlq(topic) {
  if (!window.confirm(`Re-publish the dead letters of ${topic} to their source topic?`)) return;
  try {
    const done = await api(`/v1/ops/dlq/${encodeURIComponent(topic)}/replay`, { method: "POST" });
    window.alert(`replayed ${done.replayed} dead letter(s) from ${topic} (replay ${done.replay_id}); `
      + `${done.failed_again} failed again within 3 s`
      + (done.remaining ? `; ${done.remaining} more left for the next replay` : ""));
  } catch (err) {
    window.alert(err.message);
  }
}

async function inspectDlq(topic) {
  const panel = $("#dlq-letters");
  panel.hidden = false;
  panel.textContent = "loading...";
  try {
    const found = await api(`/v1/ops/dlq/${encodeURIComponent(topic)}`);
    panel.replaceChildren(el("strong", { text: `${topic}: ${found.total} dead letters (newest shown)` }),
      el("table", {}, ...found.letters.map((l) => el("tr", {},
        el("td", { text: `p${l.partition}@${l.offset}` }), el("td", { text: l.key || "" }),
        el("td", { text: l.context["error.class"] || "" }), el("td", { class: "error", text: l.context["error.message"] || "" }),
        el("td", { text: l.context["failed_at"] || "" }),
        el("td", { text: l.replay_attempt ? `replay attempt ${l.replay_attempt}` : "" })))));
  } catch (err) {
    panel.replaceChildren(el("span", { class: "error", text: err.message }));
  }
}

// -- wiring -------------------------------------------------------------------------------

function wire() {
  $("#signin-form").addEventListener("submit", signIn);
  $("#signout").addEventListener("click", signOut);
  for (const a of document.querySelectorAll("#nav a")) {
    a.addEventListener("click", (e) => { e.preventDefault(); go(a.getAttribute("href")); });
  }
  window.addEventListener("popstate", () => show(currentPage()));
  $("#ask-form").addEventListener("submit", ask);
  $("#search-form").addEventListener("submit", search);
  $("#question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("#ask-form").requestSubmit();
  });
  $("#new-conversation").addEventListener("click", () => { conversation = []; $("#conversation").replaceChildren(); });
  $("#passage-close").addEventListener("click", () => { $("#passage").hidden = true; });
  $("#history-more").addEventListener("click", () => loadHistory(false));
  $("#doc-filter").addEventListener("submit", (e) => { e.preventDefault(); loadDocuments(true); });
  $("#docs-first").addEventListener("click", () => loadDocuments(true));
  $("#docs-next").addEventListener("click", () => loadDocuments(false));
  $("#file-input").addEventListener("change", (e) => { addFiles(Array.from(e.target.files)); e.target.value = ""; });
  const zone = $("#dropzone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("over");
    addFiles(Array.from(e.dataTransfer.files));
  });
  show(currentPage());
}

wire();
