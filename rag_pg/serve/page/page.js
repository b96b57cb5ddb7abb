// The inspection page: it reads the public HTTP API (POST /search with explain, POST /locate,
// GET /documents, /runs, /collections) and shows what came back. The URL holds the whole
// query, so a result page can be shared and reloaded. Data is only ever inserted as text.
"use strict";

const TOKEN_KEY = "ragpg.token";
const FIELDS = ["q", "mode", "collection", "prefix", "fm", "k", "cap", "nb", "expand", "rerank"];
const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setStatus(text, isError) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(isError));
}

// -- the token: asked once, kept in this tab's session storage --------------------------------

let tokenWaiters = [];

function askToken(why) {
  $("token-why").textContent = why;
  $("token-box").hidden = false;
  $("token").focus();
  return new Promise((resolve) => tokenWaiters.push(resolve));
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const value = $("token").value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $("token").value = "";
  $("token-box").hidden = true;
  const waiting = tokenWaiters;
  tokenWaiters = [];
  waiting.forEach((resolve) => resolve());
});

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.error;
  }
}

async function api(method, path, body) {
  for (;;) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, {
      method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      setStatus("This server needs a token.", true);
      await askToken(token
        ? "That token was refused. Enter the server's token (kept in this tab only)."
        : "This server needs its bearer token. It is kept in this tab only (session storage).");
      setStatus("");
      continue;
    }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }
}

// -- the URL is the state ---------------------------------------------------------------------

function params() { return new URLSearchParams(location.search); }

function go(search) {
  history.pushState(null, "", search ? `/?${search}` : "/");
  return settle(render());
}

function formToParams() {
  const p = new URLSearchParams();
  for (const name of FIELDS) {
    const value = $(name).value.trim();
    if (value) p.set(name, value);
  }
  return p;
}

function paramsToForm(p) {
  for (const name of FIELDS) $(name).value = p.get(name) || "";
}

function parseFrontMatter(text) {
  const filters = {};
  for (const part of text.split(",")) {
    const at = part.indexOf("=");
    if (at <= 0) continue;
    const key = part.slice(0, at).trim();
    let value = part.slice(at + 1).trim();
    if (/^-?\d+(\.\d+)?$/.test(value)) value = Number(value);
    else if (value === "true" || value === "false") value = value === "true";
    if (key) filters[key] = value;
  }
  return filters;
}

function requestFrom(p) {
  const body = { query: p.get("q"), explain: true };
  const number = (name) => (p.get(name) ? Number(p.get(name)) : undefined);
  if (p.get("mode")) body.mode = p.get("mode");
  if (p.get("collection")) body.collection = p.get("collection");
  if (p.get("prefix")) body.path_prefix = p.get("prefix");
  if (p.get("fm")) {
    const filters = parseFrontMatter(p.get("fm"));
    if (Object.keys(filters).length) body.filters = filters;
  }
  if (number("k")) body.k = number("k");
  if (number("cap")) body.max_per_document = number("cap");
  if (number("nb")) body.neighbours = number("nb");
  if (p.get("expand")) body.expand = p.get("expand");
  if (p.get("rerank")) body.rerank = p.get("rerank") === "1";
  return body;
}

// -- highlighting: the query's words, matched without regard to case or accents ---------------

function fold(text) {
  // Folded text and, for each folded character, the index of the original one.
  let folded = "";
  const origin = [];
  for (let i = 0; i < text.length; i++) {
    const f = text[i].normalize("NFD").replace(/\p{M}/gu, "").toLowerCase();
    for (const c of f) { folded += c; origin.push(i); }
  }
  origin.push(text.length);
  return { folded, origin };
}

function terms(query) {
  const words = fold(query || "").folded.match(/[\p{L}\p{N}_]{2,}/gu) || [];
  return [...new Set(words)].sort((a, b) => b.length - a.length);
}

function highlighted(text, words) {
  const container = el("p", { class: "text" });
  if (!words.length) { container.textContent = text; return container; }
  const { folded, origin } = fold(text);
  const escaped = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
  // A word that starts with a query term: "sauvegarde" marks "sauvegardes", "une" not "aucune".
  const pattern = new RegExp(`(?<![\\p{L}\\p{N}_])(?:${escaped.join("|")})[\\p{L}\\p{N}_]*`, "gu");
  let last = 0;
  for (const match of folded.matchAll(pattern)) {
    const start = origin[match.index];
    const end = origin[match.index + match[0].length];
    if (start < last) continue;
    container.append(text.slice(last, start), el("mark", { text: text.slice(start, end) }));
    last = end;
  }
  container.append(text.slice(last));
  return container;
}

// -- views ------------------------------------------------------------------------------------

function show(view) {
  for (const name of ["search", "document", "runs"]) $(`${name}-view`).hidden = name !== view;
  $("search-form").hidden = view === "runs";
  $("nav-search").toggleAttribute("aria-current", false);
  $("nav-runs").toggleAttribute("aria-current", false);
  $(view === "runs" ? "nav-runs" : "nav-search").setAttribute("aria-current", "page");
}

function cite(path, anchor) { return anchor ? `${path}#${anchor}` : path; }

function docLink(path, collection, anchor, position, text) {
  const p = new URLSearchParams({ view: "doc", path });
  if (collection) p.set("collection", collection);
  if (anchor) p.set("anchor", anchor);
  if (position !== undefined && position !== null) p.set("pos", String(position));
  const back = params();
  back.delete("view");
  p.set("back", back.toString());
  const link = el("a", { href: `/?${p}`, class: "cite doc-link" }, text);
  link.addEventListener("click", (event) => { event.preventDefault(); go(p.toString()); });
  return link;
}

function shareBar(percent) {
  const bar = el("span", { class: "share-bar", "aria-hidden": "true" });
  bar.style.width = `${percent || 0}px`; // through the CSSOM: the page's CSP allows no inline style
  return bar;
}

function legsTable(hit) {
  const table = el("table", { class: "legs" },
    el("caption", { class: "hint", text: "Each retriever's part in this hit" }),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col", text: "Retriever" }), el("th", { scope: "col", text: "Rank" }),
      el("th", { scope: "col", text: "Raw score" }), el("th", { scope: "col", text: "Share of fused score" }))));
  const body = el("tbody");
  const legs = hit.legs || {};
  // the two retrievers always, absent or not; a title leg only where it matched
  const names = ["vector", "keyword", ...Object.keys(legs).filter((n) => n !== "vector" && n !== "keyword")];
  for (const name of names) {
    const leg = legs[name];
    const row = el("tr", { "data-leg": name }, el("th", { scope: "row", text: name }));
    if (!leg) {
      row.append(el("td", { class: "rank absent", text: "—" }), el("td", { class: "absent", text: "not found" }),
                 el("td", { class: "absent", text: "0%" }));
    } else {
      const share = leg.share === null || leg.share === undefined ? null : Math.round(leg.share * 100);
      row.append(el("td", { class: "rank", text: `#${leg.rank}` }),
                 el("td", { class: "raw", text: leg.score === null ? "—" : leg.score.toFixed(4) }),
                 el("td", {}, shareBar(share), share === null ? "—" : `${share}%`));
    }
    body.append(row);
  }
  table.append(body);
  return table;
}

function hitItem(hit, index, words, collection) {
  const item = el("li", { class: "hit", "data-path": hit.path, "data-anchor": hit.anchor });
  const heading = el("h3", {}, hit.title || hit.path, hit.section ? ` › ${hit.section}` : "");
  const header = el("header", {}, el("span", { class: "rank-badge", text: `#${index + 1}` }), heading,
    el("span", { class: "score", text: `score ${Number(hit.score).toFixed(4)}` }));
  if (hit.fused_score !== undefined && hit.fused_score !== hit.score) {
    header.append(el("span", { class: "score", text: `fused ${Number(hit.fused_score).toFixed(4)}` }));
  }
  if (hit.confidence) {
    header.append(el("span", { class: `confidence ${hit.confidence}`, text: `confidence: ${hit.confidence}` }));
  }
  item.append(header);
  const where = el("p", {}, docLink(hit.path, hit.collection || collection, hit.anchor, hit.position,
                                    cite(hit.path, hit.anchor)));
  if (hit.url) where.append(" ", el("a", { href: hit.url, rel: "noopener", text: "source" }));
  item.append(where, legsTable(hit), highlighted(hit.content, words));
  if (hit.window) {
    const w = hit.window;
    item.append(el("details", {}, el("summary", {}, `Neighbour window: chunks ${w.start_position}–${w.end_position}`),
                   highlighted(w.text, words)));
  }
  if (hit.expanded) {
    const x = hit.expanded;
    item.append(el("details", {}, el("summary", {}, `Expanded (${x.kind}): ${x.title || x.path}`),
                   highlighted(x.text, words)));
  }
  return item;
}

async function renderSearch(p) {
  show("search");
  paramsToForm(p);
  const list = $("hits");
  list.replaceChildren();
  $("whynot-answer").replaceChildren();
  $("target").value = p.get("why") || "";
  if (!p.get("q")) { $("whynot").hidden = true; setStatus("Type a query."); return; }
  setStatus("Searching…");
  const request = requestFrom(p);
  try {
    const data = await api("POST", "/search", request);
    const words = terms(request.query);
    data.hits.forEach((hit, i) => list.append(hitItem(hit, i, words, request.collection)));
    setStatus(data.hits.length ? `${data.hits.length} hits for “${request.query}”.`
                               : `No hit for “${request.query}”.`);
  } catch (error) {
    setStatus(error.message, true);
  }
  $("whynot").hidden = false;
  if (p.get("why")) await renderWhyNot(request, p.get("why"));
}

async function renderWhyNot(request, target) {
  const box = $("whynot-answer");
  box.replaceChildren(el("p", { text: "Looking…" }));
  try {
    const answer = await api("POST", "/locate", { ...request, explain: false, target });
    const list = el("ul", { class: "located" });
    for (const [leg, info] of Object.entries(answer.legs || {})) {
      list.append(el("li", { "data-leg": leg }, el("strong", { text: `${leg}: ` }),
        info.rank ? `#${info.rank}${info.score !== undefined && info.score !== null ? ` (raw score ${info.score.toFixed(4)})` : ""}`
                  : info.note));
    }
    if (answer.fused) {
      list.append(el("li", { "data-leg": "fused" }, el("strong", { text: "fused: " }),
                     answer.fused.rank ? `#${answer.fused.rank}` : answer.fused.note));
    }
    box.replaceChildren(el("p", { class: "verdict", text: answer.verdict }), list);
  } catch (error) {
    box.replaceChildren(el("p", { class: "error", text: error.message }));
  }
}

async function renderDocument(p) {
  show("document");
  const back = p.get("back");
  $("doc-back").setAttribute("href", back ? `/?${back}` : "/");
  setStatus("Loading the document…");
  const query = new URLSearchParams({ path: p.get("path") || "" });
  if (p.get("collection")) query.set("collection", p.get("collection"));
  try {
    const doc = await api("GET", `/documents?${query}`);
    $("doc-title").textContent = doc.title || doc.path;
    const meta = $("doc-meta");
    meta.replaceChildren();
    for (const [label, value] of [["Path", doc.path], ["Collection", doc.collection], ["Content hash", doc.content_hash],
                                  ["Indexed at", doc.indexed_at], ["Chunks", doc.chunk_count], ["Language", doc.language]]) {
      meta.append(el("dt", { text: label }), el("dd", { text: value }));
    }
    $("doc-fm").textContent = JSON.stringify(doc.front_matter, null, 2);
    const words = terms(back ? new URLSearchParams(back).get("q") : "");
    const chunks = $("doc-chunks");
    chunks.replaceChildren();
    let marked = null;
    for (const chunk of doc.chunks) {
      const isHit = String(chunk.position) === p.get("pos") ||
                    (!p.get("pos") && p.get("anchor") && chunk.anchor === p.get("anchor"));
      const item = el("li", { id: `chunk-${chunk.position}`, class: isHit ? "marked" : null,
                              "aria-current": isHit ? "true" : null, tabindex: isHit ? "-1" : null },
        el("h3", {}, chunk.section || "(preamble)", " ", el("span", { class: "cite", text: cite(doc.path, chunk.anchor) })),
        highlighted(chunk.content, words));
      if (isHit && !marked) marked = item;
      chunks.append(item);
    }
    setStatus(`${doc.chunks.length} chunks${marked ? "; the hit's chunk is marked" : ""}.`);
    if (marked) { marked.scrollIntoView({ block: "center" }); marked.focus(); }
  } catch (error) {
    $("doc-title").textContent = "";
    $("doc-meta").replaceChildren();
    $("doc-chunks").replaceChildren();
    setStatus(error.message, true);
  }
}

async function renderRuns(p) {
  show("runs");
  setStatus("Loading the ingest runs…");
  const query = new URLSearchParams({ limit: "50" });
  if (p.get("collection")) query.set("collection", p.get("collection"));
  const body = $("runs").querySelector("tbody");
  body.replaceChildren();
  try {
    const data = await api("GET", `/runs?${query}`);
    for (const run of data.runs) {
      const errors = run.errors && run.errors.length
        ? el("details", {}, el("summary", {}, `${run.errors.length}`),
             el("ul", {}, ...run.errors.map((e) => el("li", {}, typeof e === "object"
               ? `${e.path || ""}: ${e.error || e.message || JSON.stringify(e)}` : String(e)))))
        : "0";
      body.append(el("tr", { "data-run": run.id },
        el("td", { text: run.id }), el("td", { text: run.collection }),
        el("td", { class: `status-${run.status}`, text: run.status }),
        el("td", { text: run.started_at }),
        el("td", { text: run.duration_seconds === null ? "—" : Number(run.duration_seconds).toFixed(1) }),
        el("td", { text: run.documents_seen }), el("td", { text: run.documents_indexed }),
        el("td", { text: run.documents_skipped }), el("td", { text: run.documents_failed }),
        el("td", { text: run.documents_deleted }), el("td", { text: run.chunks_upserted }),
        el("td", {}, errors)));
    }
    setStatus(`${data.runs.length} runs.`);
  } catch (error) {
    setStatus(error.message, true);
  }
}

let collectionsLoaded = false;

async function loadCollections() {
  if (collectionsLoaded) return;
  try {
    const data = await api("GET", "/collections");
    const select = $("collection");
    select.replaceChildren(el("option", { value: "", text: `default (${data.default})` }));
    for (const name of data.collections) {
      if (name !== data.default) select.append(el("option", { value: name, text: name }));
    }
    collectionsLoaded = true;
  } catch (error) {
    setStatus(error.message, true);
  }
}

async function render() {
  const p = params();
  await loadCollections();
  const view = p.get("view");
  if (view === "doc") return renderDocument(p);
  if (view === "runs") return renderRuns(p);
  return renderSearch(p);
}

// body[data-ready] is "yes" once what the URL asks for is on the page (tests wait for it).
let pending = 0;
function settle(promise) {
  pending += 1;
  document.body.dataset.ready = "no";
  return promise.finally(() => {
    pending -= 1;
    if (pending === 0) document.body.dataset.ready = "yes";
  });
}

$("search-form").addEventListener("submit", (event) => {
  event.preventDefault();
  go(formToParams().toString());
  $("main").focus();
});

$("whynot-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const p = params();
  const target = $("target").value.trim();
  if (!target || !p.get("q")) return;
  p.set("why", target);
  history.pushState(null, "", `/?${p}`);
  settle(renderWhyNot(requestFrom(p), target));
});

$("nav-search").addEventListener("click", (event) => { event.preventDefault(); go(""); });
$("nav-runs").addEventListener("click", (event) => { event.preventDefault(); go("view=runs"); });
$("doc-back").addEventListener("click", (event) => {
  event.preventDefault();
  go(params().get("back") || "");
});
window.addEventListener("popstate", () => settle(render()));
settle(render());
