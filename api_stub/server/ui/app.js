// hivemind explorer: plain JavaScript over the JSON API of `hivemind serve`, no dependencies.
// The admin token lives in this tab's sessionStorage and goes out as a Bearer header only.
// Views are addressed by the URL hash (#/ns/NS/notes, ...) so that back, forward and links work.
"use strict";

const TOKEN_KEY = "hivemind.token";
const $ = (sel) => document.querySelector(sel);
const view = () => $("#view");

// -- DOM helpers: text goes in as text, never as HTML ------------------------------------------
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "width") el.style.width = v;   // CSSOM: allowed by the page's CSP
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const kid of kids.flat()) el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  return el;
}
// replaceChildren with nested arrays flattened (and null / false left out)
function put(el, ...kids) {
  el.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false)
    .map((k) => (k instanceof Node ? k : document.createTextNode(String(k)))));
}
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
const day = (t) => (t ? String(t).replace("T", " ").replace(/(\.\d+)?(Z|\+00:00)$/, " UTC") : "–");
const enc = encodeURIComponent;

// -- the API ------------------------------------------------------------------------------------
class ApiFailure extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}
async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  busy(+1);
  try {
    const resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const err = data.error || {};
      throw new ApiFailure(resp.status, err.code || "http_" + resp.status, err.message || resp.statusText);
    }
    return data;
  } finally { busy(-1); }
}
let pending = 0;
function busy(d) { pending += d; $("#busy").textContent = pending > 0 ? "Loading…" : ""; }

// -- login --------------------------------------------------------------------------------------
function showLogin(message) {
  $("#login").hidden = false;
  view().replaceChildren();
  $("#nav").replaceChildren();
  $("#logout").hidden = true;
  $("#who").textContent = "";
  $("#login-error").textContent = message || "";
  $("#token").focus();
}
async function login(ev) {
  ev.preventDefault();
  const token = $("#token").value.trim();
  if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
  try {
    await api("GET", "/v1/namespaces");
  } catch (e) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(e.status === 401 ? "Unknown token." : e.status === 403 ? "This token has no admin right." : e.message);
    return;
  }
  $("#token").value = "";
  $("#login").hidden = true;
  route();
}
function logout() { sessionStorage.removeItem(TOKEN_KEY); location.hash = "#/"; showLogin("Logged out."); }

// -- routing ------------------------------------------------------------------------------------
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, query] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || "") };
}
function nav(ns, current) {
  const items = [["", "Namespaces", "#/"]];
  if (ns) {
    for (const [key, label] of [["status", "Status"], ["notes", "Notes"], ["query", "Playground"], ["audit", "Audit"], ["curves", "Curves"]]) {
      items.push([key, label, `#/ns/${enc(ns)}/${key}`]);
    }
  }
  $("#nav").replaceChildren(...items.map(([key, label, href]) =>
    h("a", { href, "aria-current": key === current ? "page" : null }, ns && key ? label : label)));
}
async function route() {
  const { parts, params } = parseHash();
  $("#login").hidden = true;
  $("#logout").hidden = !sessionStorage.getItem(TOKEN_KEY);
  const [head, ns, what, id] = parts;
  const v = view();
  try {
    if (head !== "ns" || !ns) { nav(null, ""); await namespacesView(v); }
    else {
      const key = what || "status";
      nav(ns, key === "note" ? "notes" : key);
      if (key === "status") await statusView(v, ns);
      else if (key === "notes") await notesView(v, ns, params);
      else if (key === "note") await noteView(v, ns, id);
      else if (key === "query") await playgroundView(v, ns, params);
      else if (key === "audit" && id) await auditEntryView(v, ns, id, params);
      else if (key === "audit") await auditView(v, ns, params);
      else if (key === "curves") await curvesView(v, ns);
      else put(v, h("p", {}, "No such view."));
    }
  } catch (e) {
    if (e instanceof ApiFailure && e.status === 401) { showLogin("Log in with an admin token."); return; }
    put(v, h("h1", {}, "Error"), h("p", { class: "error", role: "alert" }, e.message));
  }
  const heading = v.querySelector("h1");
  if (heading) { heading.tabIndex = -1; heading.focus({ preventScroll: true }); }
}

// -- namespaces and status ----------------------------------------------------------------------
async function namespacesView(v) {
  const st = await api("GET", "/v1/namespaces");
  document.title = "Namespaces · hivemind";
  const cards = st.namespaces.map((n) => h("div", { class: "card", "data-ns": n.ns },
    h("h2", {}, h("a", { href: `#/ns/${enc(n.ns)}/status` }, n.ns)),
    facts([["events", n.stream_length], ["lag", `${n.lag_entries} entries, ${n.lag_seconds} s`],
           ["dead letters", n.dead_letters], ["queries served", n.queries_served],
           ["last query", n.last_query ? `${day(n.last_query.served_at)} (${n.last_query.agent || "anonymous"})` : "none"]]),
    h("p", {}, h("a", { href: `#/ns/${enc(n.ns)}/notes` }, "notes"), " · ",
      h("a", { href: `#/ns/${enc(n.ns)}/audit` }, "audit"), " · ",
      h("a", { href: `#/ns/${enc(n.ns)}/query` }, "playground"))));
  put(v, h("h1", {}, "Namespaces"),
    st.namespaces.length ? h("div", { class: "cards" }, cards) : h("p", {}, "No namespace yet."),
    workersTable(st.workers));
}
function facts(rows) {
  return h("dl", { class: "facts" }, rows.map(([k, val]) => [h("dt", {}, k), h("dd", { "data-fact": k }, val)]));
}
function workersTable(ws) {
  return [h("h2", {}, `Workers (${ws.length})`), ws.length ? h("div", { class: "scroll" }, h("table", {},
    h("thead", {}, h("tr", {}, ["name", "kind", "state", "queues", "host", "pid", "jobs ok", "failed", "last heartbeat"].map((x) => h("th", {}, x)))),
    h("tbody", {}, ws.map((w) => h("tr", {}, h("td", { class: "mono" }, w.name), h("td", {}, w.kind), h("td", {}, w.state),
      h("td", {}, w.queues.join(", ")), h("td", {}, w.hostname), h("td", { class: "num" }, w.pid),
      h("td", { class: "num" }, w.successful_jobs), h("td", { class: "num" }, w.failed_jobs), h("td", {}, day(w.last_heartbeat)))))))
    : h("p", { class: "error" }, "No live worker: queries will not be answered.")];
}
async function statusView(v, ns) {
  const [st, dead] = await Promise.all([api("GET", `/v1/ns/${enc(ns)}/status`), api("GET", `/v1/ns/${enc(ns)}/dead?limit=50`)]);
  document.title = `${ns} · hivemind`;
  const n = st.namespaces[0];
  put(v, h("h1", {}, `Namespace ${ns}`),
    facts([["events", n.stream_length], ["checkpoint", n.checkpoint], ["projected", n.projected],
           ["lag", `${n.lag_entries} entries, ${n.lag_seconds} s`], ["dead letters", n.dead_letters],
           ["queries served", n.queries_served],
           ["last query", n.last_query ? `${n.last_query.query_id} by ${n.last_query.agent || "anonymous"} at ${day(n.last_query.served_at)}` : "none"]]),
    h("h2", {}, `Dead letters (${dead.total}${dead.truncated ? `, first ${dead.shown}` : ""})`),
    dead.dead.length ? h("div", { class: "scroll" }, h("table", {},
      h("thead", {}, h("tr", {}, h("th", {}, "entry"), h("th", {}, "reason"))),
      h("tbody", {}, dead.dead.map((d) => h("tr", {}, h("td", { class: "mono" }, d.entry), h("td", {}, d.reason))))))
      : h("p", {}, "None."),
    workersTable(st.workers));
}

// -- notes --------------------------------------------------------------------------------------
async function notesView(v, ns, params) {
  const notes = await api("GET", `/v1/ns/${enc(ns)}/notes`);
  document.title = `Notes of ${ns} · hivemind`;
  const authors = [...new Set(notes.map((n) => n.agent))].sort();
  const f = { q: params.get("q") || "", tier: params.get("tier") || "", kind: params.get("kind") || "",
              scope: params.get("scope") || "", author: params.get("author") || "", forgotten: params.get("forgotten") || "no" };
  const sel = (name, label, opts) => h("div", {}, h("label", { for: `f-${name}` }, label),
    h("select", { id: `f-${name}`, name }, opts.map(([val, text]) => h("option", { value: val, selected: f[name] === val }, text))));
  const form = h("form", { class: "filters", role: "search", onsubmit: (ev) => {
      ev.preventDefault();
      const p = new URLSearchParams();
      for (const [k, val] of new FormData(form)) if (val && !(k === "forgotten" && val === "no")) p.set(k, val);
      location.hash = `#/ns/${enc(ns)}/notes` + (p.toString() ? "?" + p : "");
    } },
    h("div", {}, h("label", { for: "f-q" }, "Search (id or text)"), h("input", { id: "f-q", name: "q", type: "search", value: f.q })),
    sel("tier", "Tier", [["", "any"], ["short", "short"], ["scratch", "scratch"], ["longterm", "longterm"]]),
    sel("kind", "Kind", [["", "any"], ["note", "note"], ["scratch", "scratch"]]),
    sel("scope", "Scope", [["", "any"], ["shared", "shared"], ["private", "private"]]),
    sel("author", "Author", [["", "any"], ...authors.map((a) => [a, a])]),
    sel("forgotten", "Forgotten", [["no", "hide"], ["with", "include"], ["only", "only"]]),
    h("div", {}, h("button", { type: "submit" }, "Filter")));
  const q = f.q.toLowerCase();
  const shown = notes.filter((n) => (!q || n.note_id.toLowerCase().includes(q) || n.text.toLowerCase().includes(q))
    && (!f.tier || n.tier === f.tier) && (!f.kind || n.kind === f.kind) && (!f.scope || n.scope === f.scope)
    && (!f.author || n.agent === f.author)
    && (f.forgotten === "with" || (f.forgotten === "only" ? n.forgotten : !n.forgotten)));
  const now = Date.now();
  const rows = shown.map((n) => h("tr", { class: noteState(n) ? "forgotten" : "", "data-note": n.note_id, "data-state": noteState(n) || "live" },
    h("td", {}, h("a", { href: `#/ns/${enc(ns)}/note/${enc(n.note_id)}` }, n.note_id),
      noteState(n) ? h("span", { class: "badge forgotten" }, stateWords(n)) : null),
    h("td", {}, n.agent), h("td", {}, n.scope), h("td", {}, n.kind), h("td", {}, n.tier),
    h("td", { class: "num" }, n.tokens), h("td", { class: "num" }, n.uses),
    h("td", { class: "num" }, Math.max(0, (now - Date.parse(n.created_at)) / 864e5).toFixed(0)),
    h("td", {}, n.text.length > 90 ? n.text.slice(0, 90) + "…" : n.text)));
  put(v, h("h1", {}, `Notes of ${ns}`), form,
    h("p", { id: "notes-count" }, `${shown.length} of ${notes.length} notes`),
    h("div", { class: "scroll" }, h("table", { id: "notes" },
      h("thead", {}, h("tr", {}, ["note", "author", "scope", "kind", "tier", "tokens", "uses", "age (d)", "text"].map((x) =>
        h("th", { class: ["tokens", "uses", "age (d)"].includes(x) ? "num" : "" }, x)))),
      h("tbody", {}, rows))));
}
// a note in no answer: erased, forgotten or superseded (null: live)
function noteState(n) {
  return n.erased ? "erased" : n.forgotten ? "forgotten" : n.superseded_by ? "superseded" : null;
}
function stateWords(n) {
  const s = noteState(n);
  return s === "superseded" ? `superseded by ${n.superseded_by}` : s;
}
async function noteView(v, ns, id) {
  const [show, rec] = await Promise.all([api("GET", `/v1/ns/${enc(ns)}/notes/${enc(id)}`),
    api("GET", `/v1/ns/${enc(ns)}/notes/${enc(id)}/recency`).catch(() => null)]);
  document.title = `${id} · hivemind`;
  const n = show.note;
  const versions = show.events.filter((e) => e.type === "note.created" || e.type === "note.revised");
  const uses = show.events.filter((e) => e.type === "note.used");
  put(v, h("h1", {}, `Note ${id}`, n && noteState(n) ? ` (${stateWords(n)})` : ""),
    n ? facts([["author", n.agent], ["scope", n.scope], ["kind", n.kind], ["tokens", n.tokens],
               ["created", day(n.created_at)], ["uses", n.uses], ["last used", day(n.last_used_at)],
               ["tier now", rec ? rec.tier : "–"], ["recency now", rec && rec.points.length ? fmt(rec.points[rec.points.length - 1][4]) : "–"],
               ["metadata", n.metadata ? Object.entries(n.metadata).map(([k, x]) => `${k}=${JSON.stringify(x)}`).join(", ") : "–"],
               ["expires", n.expires_at ? day(n.expires_at) : "never"]])
      : h("p", {}, "Not projected (yet)."),
    h("h2", {}, versions.length > 1 ? `Versions (${versions.length})` : "Text"),
    versions.map((e, i) => h("div", {}, versions.length > 1 ? h("h3", {}, `${i + 1}. ${e.type} at ${day(e.at)} by ${e.agent}`) : null,
      h("pre", { class: "text" }, e.text !== undefined ? e.text : (n ? n.text : "")))),
    h("h2", {}, "How it ages"),
    rec ? recencyChart(rec) : h("p", {}, "No curve (the note is not projected)."),
    h("h2", {}, `Uses over time (${uses.length})`),
    uses.length ? usesChart(uses) : h("p", {}, "Never used."),
    h("h2", {}, `Events (${show.events.length}, log order)`),
    h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, ["position", "type", "event", "agent", "at"].map((x) => h("th", {}, x)))),
      h("tbody", {}, show.events.map((e) => h("tr", {}, h("td", { class: "mono" }, e.position), h("td", {}, e.type),
        h("td", { class: "mono" }, e.event_id), h("td", {}, e.agent), h("td", {}, day(e.at))))))),
    h("h2", {}, `Served in ${show.served.length} quer${show.served.length === 1 ? "y" : "ies"}`),
    h("ul", { class: "timeline" }, show.served.map((x) => h("li", {},
      h("a", { href: `#/ns/${enc(ns)}/audit/${enc(x.query_id)}` }, x.query_id),
      ` ${x.agent || "anonymous"} at ${day(x.served_at)}: position ${x.rank}, score ${fmt(x.score, 6)}`))));
}

// -- charts (inline SVG) ------------------------------------------------------------------------
function chart(series, opts) {
  const W = 760, H = 260, L = 44, R = 12, T = 12, B = 34;
  const xmax = opts.xmax, x = (d) => L + (W - L - R) * d / xmax, y = (val) => T + (H - T - B) * (1 - val);
  const g = [s("line", { class: "axis", x1: L, y1: y(0), x2: W - R, y2: y(0) }), s("line", { class: "axis", x1: L, y1: T, x2: L, y2: y(0) })];
  for (const t of [0, 0.25, 0.5, 0.75, 1]) {
    g.push(s("line", { class: "grid", x1: L, y1: y(t), x2: W - R, y2: y(t) }), s("text", { x: 4, y: y(t) + 4 }, t.toFixed(2)));
  }
  for (const t of opts.ticks) g.push(s("text", { x: x(t) - 8, y: H - 14 }, String(t)));
  g.push(s("text", { x: W / 2 - 30, y: H - 2 }, opts.xlabel));
  for (const [cls, pts, label] of series) {
    g.push(s("polyline", { class: `line ${cls}`, points: pts.map(([d, val]) => `${x(d).toFixed(1)},${y(val).toFixed(1)}`).join(" ") },
      s("title", {}, label)));
  }
  for (const m of opts.marks || []) g.push(m(x, y));
  return [s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": opts.label }, s("title", {}, opts.label), g),
    h("ul", { class: "legend" }, series.map(([cls, , label]) => h("li", { class: cls.split(" ")[0] }, label)), opts.legend || [])];
}
function recencyChart(rec) {
  const pts = rec.points;  // [at, age_days, uses, tier, recency, five_percent]
  const xmax = Math.max(1, pts[pts.length - 1][1]);
  const ticks = niceTicks(xmax);
  const last = pts[pts.length - 1];
  return chart([["short", pts.map((p) => [p[1], p[4]]), `this note (tier ${rec.tier} now)`],
                ["five", pts.map((p) => [p[1], p[5]]), "5 % a day"]],
    { xmax, ticks, xlabel: "age (days)", label: `Recency of ${rec.note_id} from creation to now`,
      marks: [(x, y) => s("circle", { class: "now", cx: x(last[1]), cy: y(last[4]), r: 4 }, s("title", {}, `now: ${fmt(last[4])}`)),
              ...rec.uses.map((t) => (x, y) => {
                const d = (Date.parse(t) - Date.parse(pts[0][0])) / 864e5;
                return s("line", { class: "use", x1: x(d), x2: x(d), y1: y(0), y2: y(0.08) }, s("title", {}, `used ${day(t)}`));
              })],
      legend: rec.uses.length ? [h("li", { class: "use" }, "a use")] : [] });
}
function niceTicks(max) {
  const step = [1, 2, 5, 10, 30, 60, 90, 180, 365].find((st) => max / st <= 8) || Math.ceil(max / 8);
  const out = [];
  for (let t = 0; t <= max; t += step) out.push(t);
  return out;
}
function usesChart(uses) {
  const months = new Map();
  for (const e of uses) { const m = String(e.at).slice(0, 7); months.set(m, (months.get(m) || 0) + 1); }
  const keys = [...months.keys()].sort();
  const top = Math.max(...months.values());
  return h("div", { class: "scroll" }, h("table", { class: "uses" }, h("tbody", {}, keys.map((m) => h("tr", {},
    h("td", { class: "mono" }, m), h("td", {}, bar(months.get(m) / top, "score"), h("span", { class: "val" }, months.get(m))))))));
}

// -- bars ---------------------------------------------------------------------------------------
function bar(frac, cls) {
  const f = Math.max(0, Math.min(1, Number(frac) || 0));
  return h("span", { class: `bar ${cls || ""}`, role: "img", "aria-label": `${(f * 100).toFixed(0)} %` }, h("span", { width: `${(f * 100).toFixed(1)}%` }));
}
function budgetBar(notes, budget, cls, label) {
  const used = notes.reduce((a, n) => a + n.cost, 0);
  return h("div", {}, h("div", { class: `budget ${cls || ""}`, role: "img", "aria-label": `${label}: ${used} of ${budget} tokens` },
    notes.map((n) => h("span", { width: `${(100 * n.cost / budget).toFixed(2)}%`, title: `${n.note_id}: ${n.cost} tokens` })),
    h("span", { class: "room", width: `${Math.max(0, 100 * (budget - used) / budget).toFixed(2)}%` })),
    h("p", { class: "detail" }, `${label}: ${used} of ${budget} tokens, ${budget - used} left`));
}

// -- an explanation: the playground and an audit entry show the same ------------------------------
function explanation(ns, e) {
  const d = e.derived;
  const out = [facts([["query", e.query_id], ["agent", e.agent || "anonymous"], ["text", e.text],
    ["as of", day(e.as_of) + (e.live ? " (live)" : "")], ["served", day(e.served_at)],
    ["budget", `${e.budget} tokens, used ${e.used} (${e.method})`],
    ["config", `${e.config_digest}${e.min_relevance !== null ? `, min_relevance ${e.min_relevance}` : ""}`]])];
  if (!d) {
    out.push(h("p", { class: "verdict" }, `Not re-run: ${e.not_derived}. What the entry recorded:`), recordedOnly(ns, e));
    return out;
  }
  const byId = new Map(d.notes.map((n) => [n.note_id, n]));
  const shown = d.notes.filter((n) => n.outcome === "shown");
  const seed = d.seed.notes.map((id) => byId.get(id)).filter(Boolean);
  out.push(h("p", { class: `verdict ${d.identical ? "ok" : "diff"}`, id: "reproduces" },
    d.identical ? "Reproduces: re-run on the state it saw, the answer is byte-identical."
                : "Does not reproduce: " + [...d.differences, ...d.causes].join("; "),
    ` Recorded why: ${d.recorded_why}.`));
  out.push(h("div", { class: "side" },
    h("section", { "aria-labelledby": "side-ours" }, h("h2", { id: "side-ours" }, "hivemind: packed, in context order"),
      budgetBar(shown, e.budget, "", "budget"),
      h("p", {}, `${shown.length} notes, value ${fmt(d.value)}`),
      h("ol", { id: "ours" }, shown.map((n) => h("li", { "data-note": n.note_id }, noteLink(ns, n.note_id), ` ${fmt(n.score)} · ${n.cost} tok`, n.seed ? "" : h("span", { class: "badge seed" }, "not in seed"), packedMarks(ns, n))))),
    h("section", { "aria-labelledby": "side-seed" }, h("h2", { id: "side-seed" }, "The seed: 5 % a day, top-down fill"),
      budgetBar(seed, e.budget, "seed", "budget"),
      h("p", {}, `${seed.length} notes, value ${fmt(d.seed.value)}`, d.seed.stopped_at ? `; the fill stopped at ${d.seed.stopped_at}` : ""),
      h("ol", { id: "seed" }, seed.map((n) => h("li", { "data-note": n.note_id }, noteLink(ns, n.note_id), ` ${n.seed_score.toExponential(1)} · ${n.cost} tok`,
        n.outcome === "shown" ? "" : h("span", { class: "badge " + n.outcome }, n.outcome)))))));
  out.push(h("h2", {}, "The packed context"), h("div", { class: "context", id: "context" }, shown.map((n) =>
    h("details", { "data-note": n.note_id }, h("summary", {}, `${n.position}. ${n.note_id} (${n.cost} tokens, score ${fmt(n.score)})`, packedMarks(ns, n)), h("pre", {}, n.text)))));
  out.push(candidatesTable(ns, e, d));
  return out;
}
// What a packed item says besides its score: a passage of a long note (its place), the
// near-identical notes it stands for, the older versions of the fact it updates.
function packedMarks(ns, n) {
  const ids = (xs) => xs.map((id, i) => [i ? ", " : "", noteLink(ns, id)]);
  const p = n.passage;
  return [
    p ? h("span", { class: "badge passage", "data-passage": `${p.index}/${p.count}` },
      `passage ${p.index + 1} of ${p.count}, characters ${p.start}–${p.end}`) : "",
    n.stands_for && n.stands_for.length ? h("span", { class: "marks stands-for" }, " · stands for ", ids(n.stands_for)) : "",
    n.updates && n.updates.length ? h("span", { class: "marks updates" }, " · updates ", ids(n.updates)) : "",
  ];
}
function noteLink(ns, id) { return h("a", { href: `#/ns/${enc(ns)}/note/${enc(id)}`, class: "mono" }, id); }
function candidatesTable(ns, e, d) {
  const reasons = [...new Set(d.notes.map((n) => n.outcome))];
  const tbody = h("tbody", {});
  const render = (only) => put(tbody, d.notes.filter((n) => !only || n.outcome === only || (only === "left" && n.outcome !== "shown"))
    .map((n) => h("tr", { "data-note": n.note_id, "data-outcome": n.outcome },
      h("td", {}, noteLink(ns, n.note_id)),
      h("td", {}, h("span", { class: `badge ${n.outcome}` }, n.outcome), n.seed ? [" ", h("span", { class: "badge seed" }, "seed")] : ""),
      h("td", { class: "num" }, n.position || "–"), h("td", { class: "num hide-narrow" }, n.rank || "–"),
      h("td", {}, bar(n.relevance), h("span", { class: "val" }, fmt(n.relevance))),
      h("td", {}, bar(n.recency, "rec"), h("span", { class: "val" }, fmt(n.recency))),
      h("td", {}, bar(n.score, "score"), h("span", { class: "val", "data-score": n.score }, fmt(n.score))),
      h("td", {}, bar(n.cost / e.budget, n.cost > e.budget ? "cost over" : "cost"), h("span", { class: "val" }, n.cost)),
      h("td", { class: "detail" }, n.detail))));
  const pick = h("select", { id: "outcome-filter", onchange: () => render(pick.value) },
    h("option", { value: "" }, "every matched note"), h("option", { value: "left" }, "left out only"),
    reasons.map((r) => h("option", { value: r }, r)));
  render("");
  return [h("h2", {}, `Every matched note (${d.notes.length}${d.omitted ? `, ${d.omitted} more not listed` : ""}; ${d.candidates} candidates)`),
    h("p", { class: "detail" }, Object.entries(e.reasons).map(([k, val]) => `${k}: ${val}`).join(" · ")),
    h("div", { class: "filters" }, h("label", { for: "outcome-filter" }, "Show "), pick),
    h("div", { class: "scroll" }, h("table", { class: "cands", id: "candidates" },
      h("thead", {}, h("tr", {}, ["note", "outcome", "ctx", "rank", "relevance", "recency", "score", "cost", "why"].map((x) =>
        h("th", { class: x === "rank" ? "hide-narrow num" : x === "ctx" ? "num" : "" }, x)))), tbody))];
}
function recordedOnly(ns, e) {
  const w = e.recorded;
  const rows = e.chosen.map(([id, score], i) => h("tr", { "data-note": id }, h("td", { class: "num" }, i + 1), h("td", {}, noteLink(ns, id)),
    h("td", { class: "num" }, fmt(score, 6)), h("td", { class: "num" }, w && w.shown[i] ? fmt(w.shown[i][0], 6) : "–"),
    h("td", { class: "num" }, w && w.shown[i] ? fmt(w.shown[i][1], 6) : "–"), h("td", { class: "num" }, w && w.shown[i] ? w.shown[i][2] : "–")));
  return [h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, ["ctx", "note", "score", "relevance", "recency", "cost"].map((x) => h("th", {}, x)))), h("tbody", {}, rows))),
    w ? h("p", {}, `Left out, the ${w.limit} strongest recorded: ` + w.left_out.map((r) => `${r[0]} (${r[1]}, score ${fmt(r[4])})`).join(", ")) : h("p", {}, "No left-out notes recorded.")];
}

// -- the playground -----------------------------------------------------------------------------
async function playgroundView(v, ns, params) {
  document.title = `Playground · ${ns} · hivemind`;
  const out = h("div", { id: "result" });
  const field = (id, label, attrs) => h("div", { class: attrs.wide ? "wide" : "" }, h("label", { for: id }, label), h("input", { id, name: id, ...attrs, wide: null }));
  const form = h("form", { class: "ask", onsubmit: async (ev) => {
      ev.preventDefault();
      const fd = new FormData(form);
      const body = { text: fd.get("q-text"), budget: Number(fd.get("q-budget")), explain: true };
      if (fd.get("q-asof")) body.as_of = fd.get("q-asof");
      if (fd.get("q-minrel")) body.config = { min_relevance: Number(fd.get("q-minrel")) };
      put(out, h("p", {}, "Asking…"));
      try {
        const res = await api("POST", `/v1/ns/${enc(ns)}/query`, body);
        const e = await api("GET", `/v1/ns/${enc(ns)}/audit/${enc(res.query_id)}/explain`);
        put(out, h("h2", {}, "Answer"), explanation(ns, e),
          h("p", {}, h("a", { href: `#/ns/${enc(ns)}/audit/${enc(res.query_id)}` }, "Open its audit entry")));
      } catch (err) { put(out, h("p", { class: "error", role: "alert" }, err.message)); }
    } },
    field("q-text", "Query", { type: "search", required: true, value: params.get("text") || "", wide: true, maxlength: 16384 }),
    field("q-budget", "Budget (tokens)", { type: "number", min: 1, max: 1000000, required: true, value: params.get("budget") || 500 }),
    field("q-asof", "As of (RFC 3339, optional)", { type: "text", placeholder: "2026-06-01T12:00:00Z", value: params.get("as_of") || "" }),
    field("q-minrel", "min_relevance (optional)", { type: "number", min: 0, max: 1, step: "any", value: "" }),
    h("div", {}, h("button", { type: "submit" }, "Ask")));
  put(v, h("h1", {}, `Query playground · ${ns}`),
    h("p", { class: "hint" }, "Runs a real query as this token's agent (it is served and audited like any other) with every candidate explained, beside the seed's rule on the same candidates."),
    form, out);
}

// -- the audit timeline -------------------------------------------------------------------------
async function auditView(v, ns, params) {
  const entries = (await api("GET", `/v1/ns/${enc(ns)}/audit?limit=1000`)).reverse();
  document.title = `Audit of ${ns} · hivemind`;
  const agents = [...new Set(entries.map((x) => x.event.agent || ""))].sort();
  const agent = params.get("agent");
  const pick = h("select", { id: "agent-filter", onchange: () => {
    location.hash = `#/ns/${enc(ns)}/audit` + (pick.value !== "*" ? `?agent=${enc(pick.value)}` : "");
  } }, h("option", { value: "*" }, "every agent"), agents.map((a) => h("option", { value: a, selected: agent === a }, a || "anonymous")));
  const shown = entries.filter((x) => agent === null || (x.event.agent || "") === agent);
  const byDay = new Map();
  for (const x of shown) { const k = String(x.event.served_at || x.event.as_of).slice(0, 10); if (!byDay.has(k)) byDay.set(k, []); byDay.get(k).push(x); }
  put(v, h("h1", {}, `Audit of ${ns}`),
    h("div", { class: "filters" }, h("label", { for: "agent-filter" }, "Agent "), pick),
    h("p", {}, `${shown.length} served quer${shown.length === 1 ? "y" : "ies"}, newest first (the newest 1000 of the namespace)`),
    [...byDay.entries()].map(([k, xs]) => [h("h2", {}, k), h("div", { class: "scroll" }, h("table", { class: "audit" },
      h("thead", {}, h("tr", {}, ["served", "agent", "query", "as of", "budget", "used", "notes", "method"].map((x) => h("th", {}, x)))),
      h("tbody", {}, xs.map((x) => { const e = x.event; return h("tr", { "data-query": e.query_id },
        h("td", {}, h("a", { href: `#/ns/${enc(ns)}/audit/${enc(e.query_id)}` }, day(e.served_at))),
        h("td", {}, e.agent || "anonymous"), h("td", {}, e.text), h("td", {}, e.requested_as_of ? day(e.as_of) : "live"),
        h("td", { class: "num" }, e.budget), h("td", { class: "num" }, e.used), h("td", { class: "num" }, e.chosen.length), h("td", {}, e.method)); }))))]));
}
async function auditEntryView(v, ns, qid, params) {
  const note = params.get("note");
  const e = await api("GET", `/v1/ns/${enc(ns)}/audit/${enc(qid)}/explain` + (note ? `?note=${enc(note)}` : ""));
  document.title = `${qid} · hivemind`;
  const verdict = h("div", { id: "reproduction", "aria-live": "polite" });
  const reproduce = h("button", { type: "button", id: "reproduce", onclick: async () => {
    put(verdict, h("p", {}, "Re-running…"));
    try {
      const got = await api("POST", `/v1/ns/${enc(ns)}/audit/reproduce`, { query_ids: [qid] });
      const r = got.reproductions[0];
      put(verdict, h("div", { class: `verdict ${r && r.identical ? "ok" : "diff"}` },
        h("p", {}, r ? (r.identical ? "Identical: the re-run gives the same bytes as what was served." : "Different.") : "Not found."),
        r && r.differences.length ? h("ul", {}, r.differences.map((x) => h("li", {}, "difference: " + x))) : null,
        r && r.causes.length ? h("ul", {}, r.causes.map((x) => h("li", {}, "cause: " + x))) : null));
    } catch (err) { put(verdict, h("p", { class: "error", role: "alert" }, err.message)); }
  } }, "Reproduce");
  const whyNot = h("form", { class: "filters", onsubmit: (ev) => {
      ev.preventDefault();
      const id = new FormData(whyNot).get("why-note");
      location.hash = `#/ns/${enc(ns)}/audit/${enc(qid)}` + (id ? `?note=${enc(id)}` : "");
    } }, h("div", {}, h("label", { for: "why-note" }, "Why not this note?"), h("input", { id: "why-note", name: "why-note", value: note || "", placeholder: "note id" })),
    h("div", {}, h("button", { type: "submit", class: "secondary" }, "Explain")));
  const answer = [];
  if (note && e.derived) {
    const n = e.derived.note;
    answer.push(h("p", { class: "verdict", id: "note-verdict" }, n ? `${n.note_id}: ${n.outcome}. ${n.detail}.` : e.derived.note_absent));
  }
  put(v, h("h1", {}, `What ${e.agent || "an anonymous agent"} saw`),
    h("p", {}, reproduce, " ", h("a", { href: `#/ns/${enc(ns)}/audit?agent=${enc(e.agent)}` }, `${e.agent || "anonymous"}'s timeline`)),
    verdict, whyNot, answer, explanation(ns, e));
}

// -- curves -------------------------------------------------------------------------------------
async function curvesView(v, ns) {
  const c = await api("GET", `/v1/ns/${enc(ns)}/curves`);
  document.title = `Curves · ${ns} · hivemind`;
  const pts = (key) => c.ages.map((d, i) => [d, c.tiers[key][i]]);
  const cfg = c.config;
  const at = (d) => c.ages.indexOf(d);
  const ages = [0, 30, 90, 180, 365, 730].filter((d) => at(d) >= 0);
  put(v, h("h1", {}, `Decay curves · ${ns}`),
    h("p", {}, `Config ${c.config_digest} (${c.source === "worker" ? "the one the newest served query ran under" : "this server's; no served query names one"}): `,
      `short: half-life ${cfg.short.half_life_days} d, floor ${cfg.short.floor}; scratch: half-life ${cfg.scratch.half_life_days} d, floor ${cfg.scratch.floor}; `,
      `longterm after ${cfg.longterm_uses} uses, no decay.`),
    chart([["short", pts("short"), "short"], ["scratch", pts("scratch"), "scratch"], ["longterm", pts("longterm"), "longterm"], ["five", pts("five_percent"), "5 % a day"]],
      { xmax: c.ages[c.ages.length - 1], ticks: [0, 90, 180, 365, 540, 730], xlabel: "age (days)", label: "Recency multiplier by tier beside 5 % a day" }),
    h("div", { class: "scroll" }, h("table", { id: "curve-table" }, h("thead", {}, h("tr", {}, h("th", {}, "age (days)"), ["short", "scratch", "longterm", "5 % a day"].map((x) => h("th", { class: "num" }, x)))),
      h("tbody", {}, ages.map((d) => h("tr", {}, h("td", {}, d), ["short", "scratch", "longterm"].map((k) => h("td", { class: "num" }, fmt(c.tiers[k][at(d)], 4))),
        h("td", { class: "num" }, c.tiers.five_percent[at(d)].toExponential(2))))))));
}

// -- start --------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", login);
  $("#logout").addEventListener("click", logout);
  window.addEventListener("hashchange", route);
  route();
});
