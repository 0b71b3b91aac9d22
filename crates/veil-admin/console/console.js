// Veil web console: plain ES module, no framework, no build step. It polls the JSON admin API (/api/v1) and
// builds every node with el()/svg() and textContent, never from markup, because queue names, bodies and
// attributes are user data. Peeks only: nothing here receives a message.

const POLL_MS = 2000;
const SERIES_MS = 30000; // the server samples each queue every 30 s; asking more often gains nothing
const REDRIVE_POLL_MS = 500;

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

// ---- small DOM and formatting helpers ------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "testid") node.dataset.testid = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

function bytes(n) {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = -1;
  do { v /= 1024; i++; } while (v >= 1024 && i < units.length - 1);
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

function age(ms) {
  if (!ms) return "–";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

const time = (ms) => (ms ? new Date(ms).toLocaleString() : "–");
const keyOf = (q) => `${q.namespace}/${q.name}`;
const queuePath = (ns, name) => `/api/v1/queues/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;

// ---- the API ---------------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// A server started with --admin-token answers 401 without it: the page then asks for the token once (one
// dialog however many requests were refused), keeps it in sessionStorage (this tab only) and sends it as a
// bearer header — never in a URL, where logs and history would keep it.
const TOKEN_KEY = "veil-admin-token";
let tokenAsked = null; // the pending dialog's promise, shared by every refused request

function askToken(refused) {
  if (!tokenAsked) {
    tokenAsked = new Promise((resolve) => {
      const dialog = $("token-dialog");
      const form = $("token-form");
      $("token-error").textContent = refused ? "the server refused this token" : "";
      const submit = (event) => {
        event.preventDefault();
        const token = $("token-input").value.trim();
        if (!token) return;
        form.removeEventListener("submit", submit);
        sessionStorage.setItem(TOKEN_KEY, token);
        $("token-input").value = "";
        dialog.close();
        tokenAsked = null;
        resolve(token);
      };
      form.addEventListener("submit", submit);
      if (!dialog.open) dialog.showModal();
    });
  }
  return tokenAsked;
}

async function api(path, { method = "GET", body } = {}) {
  const init = { method, headers: { Accept: "application/json" } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) init.headers.Authorization = `Bearer ${token}`;
    response = await fetch(path, init);
    if (response.status !== 401) break;
    sessionStorage.removeItem(TOKEN_KEY);
    await askToken(Boolean(token));
  }
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = null; }
  if (!response.ok) {
    const detail = data && data.error;
    throw new ApiError(response.status, detail ? detail.code : "", detail ? detail.message : `HTTP ${response.status}`);
  }
  return data;
}

// ---- state -----------------------------------------------------------------------------------------------

const state = {
  queues: [],          // the last /api/v1/queues answer
  rows: new Map(),     // queue key -> { tr, cells, spark }
  series: new Map(),   // queue key -> { at, samples }
  selected: null,      // { namespace, name, fifo }
  detail: null,        // the selected queue's detail
  browseNext: null,    // from_seq of "Load more" in "all" mode
  sawDeadLetters: false,
  redriveTimer: null,
  sort: { key: "name", desc: false }, // the queue table's order: a column header click changes it
  totals: new Map(),   // queue key -> { at, sent, received, deleted } of the previous poll, for the rates
  rates: new Map(),    // queue key -> { sent, received, deleted } per second over the last poll interval
};

// ---- charts: inline SVG polylines of visible / in flight / delayed -----------------------------------------

function chart(samples, width, height, { axis = false, separate = false } = {}) {
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "spark", role: "img" });
  const pad = axis ? 14 : 2;
  const top = axis ? 8 : 2;
  // With an axis the time labels get their own strip under the plot, so they never cross a line.
  const bottom = axis ? height - 14 : height - 2;
  const peak = (series) => Math.max(1, ...samples.map((s) => s[series]));
  const max = Math.max(1, ...samples.map((s) => Math.max(s.visible, s.inflight, s.delayed)));
  const span = samples.length > 1 ? samples[samples.length - 1].at_ms - samples[0].at_ms : 0;
  const x = (s) => (span ? pad + ((s.at_ms - samples[0].at_ms) / span) * (width - pad - 2) : width - 2);
  // Separate scales: each series fills the height by its own peak, so a small one is not flattened next
  // to a large one; the title and the tooltip give the real counts.
  const y = (v, series) => bottom - (v / (separate ? peak(series) : max)) * (bottom - top - 2);
  root.append(svg("line", { x1: pad, x2: width - 2, y1: bottom, y2: bottom, class: "axis" }));
  if (axis) {
    const label = (text, attrs) => {
      const node = svg("text", attrs);
      node.textContent = text;
      root.append(node);
    };
    if (!separate) label(String(max), { x: 0, y: top + 2 });
    if (span) label(`−${age(span)}`, { x: pad, y: height - 2 });
    label("now", { x: width - 2, y: height - 2, "text-anchor": "end" });
  }
  for (const series of ["delayed", "inflight", "visible"]) {
    if (samples.length === 0) continue;
    const points = samples.map((s) => `${x(s).toFixed(1)},${y(s[series], series).toFixed(1)}`);
    if (samples.length === 1) points.unshift(`${pad},${y(samples[0][series], series).toFixed(1)}`);
    root.append(svg("polyline", { points: points.join(" "), fill: "none", "stroke-width": 1.5, class: series }));
  }
  const last = samples[samples.length - 1];
  const title = svg("title");
  title.textContent = last
    ? `last hour; now ${last.visible} visible, ${last.inflight} in flight, ${last.delayed} delayed (peak ${max}${separate ? "; each line on its own scale" : ""})`
    : "no samples yet";
  root.prepend(title);
  return root;
}

// The server's 30-second samples plus the counts of the latest poll, so that a chart moves as the table does.
function samplesOf(queue) {
  const kept = state.series.get(keyOf(queue));
  const samples = kept ? kept.samples.slice() : [];
  samples.push({ at_ms: Date.now(), visible: queue.visible, inflight: queue.inflight, delayed: queue.delayed });
  return samples;
}

async function refreshSeries(queue) {
  const key = keyOf(queue);
  const kept = state.series.get(key);
  if (kept && Date.now() - kept.at < SERIES_MS) return;
  state.series.set(key, { at: Date.now(), samples: kept ? kept.samples : [] });
  try {
    const data = await api(`${queuePath(queue.namespace, queue.name)}/series`);
    state.series.set(key, { at: Date.now(), samples: data.samples });
  } catch {
    // The queue may have just been deleted; the next poll drops its row.
  }
}

// ---- the queue table -------------------------------------------------------------------------------------

function queueRow(queue) {
  const key = keyOf(queue);
  const cell = (name, cls) => el("td", { class: cls, testid: `queue-${name}` });
  const cells = {
    namespace: cell("namespace", "muted"),
    name: el("td", { class: "name", testid: "queue-name" },
      el("button", { type: "button", text: queue.name, "aria-label": `Open queue ${queue.name} in ${queue.namespace}`, onclick: () => select(queue) })),
    created_by: cell("created-by"),
    type: cell("type"),
    visible: cell("visible", "num"),
    inflight: cell("inflight", "num"),
    delayed: cell("delayed", "num"),
    stored: cell("stored", "num"),
    oldest: cell("oldest", "num"),
    sent_rate: cell("sent-rate", "num"),
    received_rate: cell("received-rate", "num"),
    deleted_rate: cell("deleted-rate", "num"),
    chart: cell("chart"),
  };
  const tr = el("tr", { testid: "queue-row" }, Object.values(cells));
  tr.dataset.namespace = queue.namespace;
  tr.dataset.queue = queue.name;
  cells.namespace.textContent = queue.namespace;
  cells.created_by.textContent = queue.created_by || "–";
  cells.type.append(el("span", { class: "tag", text: queue.fifo ? "fifo" : "standard" }));
  return { tr, cells, key };
}

function updateRow(row, queue) {
  const { cells } = row;
  cells.visible.textContent = queue.visible;
  cells.inflight.textContent = queue.inflight;
  cells.delayed.textContent = queue.delayed;
  cells.stored.textContent = bytes(queue.stored_bytes);
  cells.oldest.textContent = age(queue.oldest_age_ms);
  const rate = state.rates.get(keyOf(queue));
  const perSecond = (v) => (rate ? v.toFixed(1) : "–");
  cells.sent_rate.textContent = perSecond(rate ? rate.sent : 0);
  cells.received_rate.textContent = perSecond(rate ? rate.received : 0);
  cells.deleted_rate.textContent = perSecond(rate ? rate.deleted : 0);
  cells.chart.replaceChildren(chart(samplesOf(queue), 120, 24));
}

// Messages per second since the previous poll, from the running totals the list carries.
function updateRates(queues) {
  const now = Date.now();
  const next = new Map();
  for (const queue of queues) {
    const key = keyOf(queue);
    const before = state.totals.get(key);
    const seconds = before ? (now - before.at) / 1000 : 0;
    if (before && seconds > 0) {
      const per = (field) => Math.max(0, queue[field] - before[field]) / seconds;
      state.rates.set(key, { sent: per("sent"), received: per("received"), deleted: per("deleted") });
    }
    next.set(key, { at: now, sent: queue.sent, received: queue.received, deleted: queue.deleted });
  }
  state.totals = next;
  for (const key of [...state.rates.keys()]) if (!next.has(key)) state.rates.delete(key);
}

// The value a column sorts by; names ascending by default, numbers largest first.
const SORT_VALUES = {
  namespace: (q) => q.namespace,
  name: (q) => q.name,
  created_by: (q) => q.created_by || "",
  type: (q) => (q.fifo ? "fifo" : "standard"),
  visible: (q) => q.visible,
  inflight: (q) => q.inflight,
  delayed: (q) => q.delayed,
  stored: (q) => q.stored_bytes,
  oldest: (q) => q.oldest_age_ms,
  sent_rate: (q) => (state.rates.get(keyOf(q)) || { sent: -1 }).sent,
  received_rate: (q) => (state.rates.get(keyOf(q)) || { received: -1 }).received,
  deleted_rate: (q) => (state.rates.get(keyOf(q)) || { deleted: -1 }).deleted,
};

function sortedQueues() {
  const { key, desc } = state.sort;
  const value = SORT_VALUES[key] || SORT_VALUES.name;
  return state.queues.slice().sort((a, b) => {
    const x = value(a);
    const y = value(b);
    const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
    return (desc ? -order : order) || keyOf(a).localeCompare(keyOf(b));
  });
}

function sortBy(key) {
  const numeric = typeof SORT_VALUES[key]({ namespace: "", name: "", stored_bytes: 0, oldest_age_ms: 0, visible: 0, inflight: 0, delayed: 0 }) === "number";
  state.sort = state.sort.key === key ? { key, desc: !state.sort.desc } : { key, desc: numeric };
  for (const th of document.querySelectorAll("[data-sort]")) {
    th.setAttribute("aria-sort", th.dataset.sort === key ? (state.sort.desc ? "descending" : "ascending") : "none");
  }
  renderQueues();
}

function renderQueues() {
  const tbody = $("queue-rows");
  const filter = $("queue-filter").value.trim().toLowerCase();
  const seen = new Set();
  const ordered = [];
  for (const queue of sortedQueues()) {
    const key = keyOf(queue);
    seen.add(key);
    let row = state.rows.get(key);
    if (!row) {
      row = queueRow(queue);
      state.rows.set(key, row);
    }
    updateRow(row, queue);
    row.tr.classList.toggle("selected", !!state.selected && keyOf(state.selected) === key);
    row.tr.hidden = !!filter && !key.toLowerCase().includes(filter);
    ordered.push(row.tr);
  }
  for (const key of [...state.rows.keys()]) if (!seen.has(key)) state.rows.delete(key);
  // Re-appending puts the rows in the chosen order and moves rather than rebuilds existing ones.
  tbody.replaceChildren(...ordered);
  $("no-queues").hidden = state.queues.length > 0;
}

async function poll() {
  const status = $("status");
  try {
    const data = await api("/api/v1/queues");
    state.queues = data.queues;
    updateRates(state.queues);
    renderQueues();
    selectFromUrl();
    for (const queue of state.queues) refreshSeries(queue);
    status.textContent = `live · updated ${new Date().toLocaleTimeString()}`;
    status.classList.remove("error");
    if (state.selected) {
      const still = state.queues.find((q) => keyOf(q) === keyOf(state.selected));
      if (still) await refreshDetail();
      else closeDetail();
    }
  } catch (error) {
    status.textContent = `cannot reach the admin API: ${error.message}`;
    status.classList.add("error");
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

// ---- the selected queue ----------------------------------------------------------------------------------

function definitions(target, pairs) {
  target.replaceChildren(...pairs.flatMap(([term, value]) => [el("dt", { text: term }), el("dd", {}, value)]));
}

function queueLink(ref) {
  return el("span", { class: "mono", text: `${ref.namespace}/${ref.name}` });
}

// The URL names the selected queue (#/queues/<namespace>/<name>), so a reload or a shared link opens it.
function urlOf(queue) {
  return `#/queues/${encodeURIComponent(queue.namespace)}/${encodeURIComponent(queue.name)}`;
}

function selectFromUrl() {
  const match = /^#\/queues\/([^/]+)\/([^/]+)$/.exec(location.hash);
  if (!match) return;
  const [namespace, name] = [decodeURIComponent(match[1]), decodeURIComponent(match[2])];
  if (state.selected && state.selected.namespace === namespace && state.selected.name === name) return;
  const queue = state.queues.find((q) => q.namespace === namespace && q.name === name);
  if (queue) select(queue);
}

async function select(queue) {
  if (location.hash !== urlOf(queue)) history.replaceState(null, "", urlOf(queue));
  state.selected = { namespace: queue.namespace, name: queue.name, fifo: queue.fifo };
  state.detail = null;
  state.sawDeadLetters = false;
  $("detail-namespace").textContent = `${queue.namespace} / `;
  $("detail-name").textContent = queue.name;
  $("queue-detail").hidden = false;
  $("redrive-progress").hidden = true;
  stopRedrivePoll();
  renderQueues();
  await Promise.all([refreshDetail(), browse(), showLatestRedrive()]);
}

function closeDetail() {
  if (location.hash) history.replaceState(null, "", location.pathname);
  state.selected = null;
  state.detail = null;
  stopRedrivePoll();
  $("queue-detail").hidden = true;
  renderQueues();
}

async function refreshDetail() {
  const selected = state.selected;
  if (!selected) return;
  let detail;
  try {
    detail = await api(queuePath(selected.namespace, selected.name));
  } catch {
    return;
  }
  if (state.selected !== selected) return;
  state.detail = detail;
  const s = detail.settings;
  definitions($("detail-settings"), [
    ["Visibility timeout", `${s.visibility_timeout_s} s`],
    ["Delay", `${s.delay_s} s`],
    ["Retention", s.retention_s === null ? "forever" : age(s.retention_s * 1000)],
    ["Max message size", bytes(s.message_size_bytes_max)],
    ["Receive wait", `${s.receive_wait_s} s`],
    ["Max in flight", s.inflight_max],
    ["Created", time(detail.created_at_ms)],
  ]);
  const t = detail.totals;
  definitions($("detail-totals"), [
    ["Sent", t.sent], ["Received", t.received], ["Redelivered", t.redelivered],
    ["Deleted", t.deleted], ["Purged", t.purged], ["Expired", t.expired],
    ["Dead-lettered", t.dead_lettered], ["Moved out", t.moved_out],
  ]);
  const rule = detail.dead_letter;
  definitions($("detail-dead-letter"), [
    ["Sends to", rule ? queueLink(rule.dead_letter_queue) : "–"],
    ["After receives", rule ? rule.max_receive_count : "–"],
    ["Receives from", detail.dead_letter_sources.length ? detail.dead_letter_sources.map(queueLink).flatMap((n, i) => (i ? [", ", n] : [n])) : "–"],
  ]);
  drawDetailChart();
  updateRedriveOffer();
}

function drawDetailChart() {
  if (!state.detail) return;
  const separate = $("chart-separate").checked;
  $("detail-chart").replaceChildren(chart(samplesOf(state.detail.queue), 420, 120, { axis: true, separate }));
}

// The Metrics link: /metrics wants the admin token when the server has one, which a plain link cannot
// send; the page fetches it with the token and shows the text.
async function showMetrics(event) {
  event.preventDefault();
  const text = $("metrics-text");
  text.textContent = "loading…";
  $("metrics-dialog").showModal();
  for (;;) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const response = await fetch("/metrics", { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (response.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      await askToken(Boolean(token));
      continue;
    }
    text.textContent = response.ok ? await response.text() : `HTTP ${response.status}`;
    return;
  }
}

// Redrive is offered for a dead-letter queue: one that a rule names, or one holding dead-lettered messages.
function updateRedriveOffer() {
  const isDlq = (state.detail && state.detail.dead_letter_sources.length > 0) || state.sawDeadLetters;
  $("redrive-open").hidden = !isDlq;
}

// ---- the message browser (peek) ----------------------------------------------------------------------------

function bodyCell(message) {
  if (message.body !== null && message.body !== undefined) return el("pre", { text: message.body });
  return el("pre", { class: "b64", text: message.body_base64 });
}

function attributesCell(message) {
  const entries = Object.entries(message.attributes || {});
  if (!entries.length) return el("span", { class: "muted", text: "–" });
  return el("ul", { class: "attrs" }, entries.map(([name, a]) =>
    el("li", { text: `${name} (${a.data_type}) = ${a.string_value ?? `base64 ${a.binary_value_base64}`}` })));
}

function messageRow(message) {
  const selected = state.selected;
  const extra = [];
  if (message.moved_from) extra.push(el("div", { class: "muted", text: `${message.moved_reason === "dead_letter" ? "dead-lettered" : "moved"} from ${message.moved_from.namespace}/${message.moved_from.name}` }));
  if (message.group) extra.push(el("div", { class: "muted", text: `group ${message.group}` }));
  const tr = el("tr", { testid: "message-row" },
    el("td", { class: "id", testid: "message-id", text: message.id }),
    el("td", { class: "num", testid: "message-seq", text: message.seq }),
    el("td", { class: `state-${message.state}`, testid: "message-state", text: message.state }),
    el("td", { class: "num", testid: "message-receives", text: message.receive_count }),
    el("td", { testid: "message-sent", text: time(message.sent_at_ms) }),
    el("td", { class: "body", testid: "message-body" }, bodyCell(message), extra),
    el("td", { testid: "message-attributes" }, attributesCell(message)),
    el("td", { class: "row-actions" },
      el("button", { type: "button", class: "small", testid: "message-history", "aria-label": `Delivery history of message ${message.seq}`, text: "History", onclick: () => showHistory(selected, message) }),
      el("button", { type: "button", class: "small danger", testid: "message-delete", "aria-label": `Delete message ${message.seq}`, text: "Delete", onclick: () => deleteMessage(selected, message) })),
  );
  tr.dataset.seq = message.seq;
  return tr;
}

async function browse({ more = false } = {}) {
  const selected = state.selected;
  if (!selected) return;
  const mode = $("browse-state").value;
  const max = Math.min(1000, Math.max(1, Number($("browse-max").value) || 20));
  const params = new URLSearchParams({ state: mode, max: String(max) });
  if (more && state.browseNext !== null) params.set("from_seq", String(state.browseNext));
  let data;
  try {
    data = await api(`${queuePath(selected.namespace, selected.name)}/messages?${params}`);
  } catch (error) {
    $("message-rows").replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "error", text: error.message })));
    return;
  }
  if (state.selected !== selected) return;
  const rows = data.messages.map(messageRow);
  if (more) $("message-rows").append(...rows);
  else $("message-rows").replaceChildren(...rows);
  if (data.messages.some((m) => m.moved_reason === "dead_letter")) state.sawDeadLetters = true;
  updateRedriveOffer();
  const last = data.messages[data.messages.length - 1];
  // Paging walks sequence numbers, which only "all" mode follows; a peek shows the head of the queue.
  state.browseNext = mode === "all" && last && data.messages.length === max ? last.seq + 1 : null;
  $("browse-more").hidden = state.browseNext === null;
  $("no-messages").hidden = $("message-rows").children.length > 0;
}

async function deleteMessage(selected, message) {
  if (!window.confirm(`Delete message ${message.seq} (${message.id}) from ${selected.name}?`)) return;
  try {
    await api(`${queuePath(selected.namespace, selected.name)}/messages/${message.seq}`, { method: "DELETE" });
  } catch (error) {
    window.alert(`Delete failed: ${error.message}`);
  }
  await browse();
}

async function showHistory(selected, message) {
  $("history-seq").textContent = `${message.seq}`;
  const body = $("history-body");
  body.replaceChildren(el("p", { class: "muted", text: "loading…" }));
  $("history-dialog").showModal();
  let data;
  try {
    data = await api(`${queuePath(selected.namespace, selected.name)}/messages/${message.seq}/history`);
  } catch (error) {
    body.replaceChildren(el("p", { class: "muted", testid: "history-empty", text: error.status === 404 ? "no history" : `no history (${error.message})` }));
    return;
  }
  if (!data.deliveries || !data.deliveries.length) {
    body.replaceChildren(el("p", { class: "muted", testid: "history-empty", text: "no deliveries yet" }));
    return;
  }
  const head = ["Received", "#", "Protocol", "Client", "Identity", "Timeout", "Ended"];
  body.replaceChildren(el("div", { class: "scroll" }, el("table", { class: "grid", testid: "history-table" },
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col", text: h })))),
    el("tbody", {}, data.deliveries.map((d) => el("tr", {},
      el("td", { text: time(d.received_at_ms) }),
      el("td", { class: "num", text: d.receive_count }),
      el("td", { text: d.protocol ?? "–" }),
      el("td", { class: "mono", text: d.client ?? "–" }),
      el("td", { class: "mono", text: d.identity ?? "–" }),
      el("td", { class: "num", text: d.visibility_timeout_ms != null ? `${d.visibility_timeout_ms / 1000} s` : "–" }),
      el("td", { text: d.ended ? `${d.ended.how} ${time(d.ended.at_ms)}${d.ended.to ? ` → ${d.ended.to.namespace ?? ""}/${d.ended.to.name ?? d.ended.to}` : ""}` : "in flight" }),
    ))))));
}

// ---- send, purge, redrive dialogs ------------------------------------------------------------------------

function openSend() {
  const dialog = $("send-dialog");
  $("send-error").textContent = "";
  $("send-body").value = "";
  $("send-attributes").value = "";
  $("send-delay").value = "";
  dialog.querySelector(".fifo-only").hidden = !state.selected.fifo;
  dialog.showModal();
  $("send-body").focus();
}

async function submitSend(event) {
  event.preventDefault();
  const selected = state.selected;
  const message = { body: $("send-body").value };
  try {
    message.attributes = parseAttributes($("send-attributes").value);
  } catch (error) {
    $("send-error").textContent = error.message;
    return;
  }
  if ($("send-delay").value !== "") message.delay_s = Number($("send-delay").value);
  if (selected.fifo) {
    if ($("send-group").value) message.group = $("send-group").value;
    if ($("send-dedup").value) message.dedup_id = $("send-dedup").value;
  }
  try {
    await api(`${queuePath(selected.namespace, selected.name)}/messages`, { method: "POST", body: { messages: [message] } });
  } catch (error) {
    $("send-error").textContent = error.message;
    return;
  }
  $("send-dialog").close();
  await browse();
}

// One attribute per line, as the CLI takes them: name=Type:value (String, Number, or Binary with base64).
function parseAttributes(text) {
  const attributes = {};
  for (const [index, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line) continue;
    const match = /^([^=]+)=(String|Number|Binary)(\.[^:]+)?:(.*)$/.exec(line);
    if (!match) throw new Error(`attribute line ${index + 1}: write name=Type:value (Type: String, Number or Binary)`);
    const [, name, type, custom, value] = match;
    attributes[name.trim()] = type === "Binary"
      ? { data_type: type + (custom || ""), binary_value_base64: value }
      : { data_type: type + (custom || ""), string_value: value };
  }
  return attributes;
}

// ---- create, delete and edit queues ------------------------------------------------------------------------

function openCreate() {
  for (const id of ["create-name", "create-visibility", "create-delay", "create-retention"]) $(id).value = "";
  $("create-namespace").value = "default";
  $("create-fifo").checked = false;
  $("create-error").textContent = "";
  $("create-dialog").showModal();
  $("create-name").focus();
}

// The settings fields of a dialog, as the API's settings object (only those filled in).
function settingsFrom(fields) {
  const settings = {};
  for (const [key, id] of Object.entries(fields)) {
    const value = $(id).value.trim();
    if (value !== "") settings[key] = Number(value);
  }
  return settings;
}

async function submitCreate(event) {
  event.preventDefault();
  const body = {
    namespace: $("create-namespace").value.trim() || "default",
    name: $("create-name").value.trim(),
    fifo: $("create-fifo").checked,
    settings: settingsFrom({ visibility_timeout_s: "create-visibility", delay_s: "create-delay", retention_s: "create-retention" }),
  };
  let made;
  try {
    made = await api("/api/v1/queues", { method: "POST", body });
  } catch (error) {
    $("create-error").textContent = error.message;
    return;
  }
  $("create-dialog").close();
  const data = await api("/api/v1/queues");
  state.queues = data.queues;
  renderQueues();
  await select(made.queue);
}

function openDelete() {
  $("delete-queue-name").textContent = state.selected.name;
  $("delete-confirm").value = "";
  $("delete-error").textContent = "";
  $("delete-dialog").showModal();
  $("delete-confirm").focus();
}

async function submitDelete(event) {
  event.preventDefault();
  const selected = state.selected;
  if ($("delete-confirm").value !== selected.name) {
    $("delete-error").textContent = `type the queue's name, ${selected.name}, to delete it`;
    return;
  }
  try {
    await api(queuePath(selected.namespace, selected.name), { method: "DELETE" });
  } catch (error) {
    $("delete-error").textContent = error.message;
    return;
  }
  $("delete-dialog").close();
  $("status").textContent = `deleted ${keyOf(selected)}`;
  state.queues = state.queues.filter((q) => keyOf(q) !== keyOf(selected));
  closeDetail();
}

const SETTING_FIELDS = {
  visibility_timeout_s: "settings-visibility",
  delay_s: "settings-delay",
  retention_s: "settings-retention",
  message_size_bytes_max: "settings-size",
  receive_wait_s: "settings-wait",
  inflight_max: "settings-inflight",
};

function openSettings() {
  const s = state.detail.settings;
  for (const [key, id] of Object.entries(SETTING_FIELDS)) $(id).value = s[key] ?? "";
  $("settings-history").checked = s.delivery_history !== false;
  $("settings-error").textContent = "";
  $("settings-dialog").showModal();
}

async function submitSettings(event) {
  event.preventDefault();
  const selected = state.selected;
  const body = settingsFrom(SETTING_FIELDS);
  body.delivery_history = $("settings-history").checked;
  try {
    await api(queuePath(selected.namespace, selected.name), { method: "PATCH", body });
  } catch (error) {
    $("settings-error").textContent = error.message;
    return;
  }
  $("settings-dialog").close();
  await refreshDetail();
}

function openPurge() {
  $("purge-queue-name").textContent = state.selected.name;
  $("purge-confirm").value = "";
  $("purge-error").textContent = "";
  $("purge-dialog").showModal();
  $("purge-confirm").focus();
}

async function submitPurge(event) {
  event.preventDefault();
  const selected = state.selected;
  // The server checks the name too (ConfirmationMismatch); its message is what the operator sees.
  try {
    const done = await api(`${queuePath(selected.namespace, selected.name)}/purge`, { method: "POST", body: { confirm: $("purge-confirm").value } });
    $("purge-dialog").close();
    $("status").textContent = `purged ${done.purged} message(s) from ${selected.name}`;
  } catch (error) {
    $("purge-error").textContent = error.message;
    return;
  }
  await browse();
}

function openRedrive() {
  const select = $("redrive-target");
  const selected = state.selected;
  select.replaceChildren(el("option", { value: "", text: "the queue each message came from" }),
    state.queues.filter((q) => keyOf(q) !== keyOf(selected))
      .map((q) => el("option", { value: JSON.stringify({ namespace: q.namespace, name: q.name }), text: keyOf(q) })));
  $("redrive-queue-name").textContent = selected.name;
  $("redrive-error").textContent = "";
  $("redrive-dialog").showModal();
}

async function submitRedrive(event) {
  event.preventDefault();
  const selected = state.selected;
  const target = $("redrive-target").value;
  const body = target ? { to: JSON.parse(target) } : {};
  try {
    await api(`${queuePath(selected.namespace, selected.name)}/redrive`, { method: "POST", body });
  } catch (error) {
    $("redrive-error").textContent = error.message;
    return;
  }
  $("redrive-dialog").close();
  await showLatestRedrive();
}

function stopRedrivePoll() {
  clearTimeout(state.redriveTimer);
  state.redriveTimer = null;
}

// Shows the selected queue's most recent redrive and, while it runs, follows it.
async function showLatestRedrive() {
  stopRedrivePoll();
  const selected = state.selected;
  if (!selected) return;
  let data;
  try {
    data = await api(`${queuePath(selected.namespace, selected.name)}/redrive`);
  } catch {
    return;
  }
  if (state.selected !== selected) return;
  const task = data.redrives[0];
  $("redrive-progress").hidden = !task;
  if (!task) return;
  const bar = $("redrive-bar");
  bar.max = Math.max(1, task.to_move);
  bar.value = task.status === "completed" && task.to_move === 0 ? 1 : task.moved;
  $("redrive-status").textContent = task.status + (task.failure ? ` (${task.failure})` : "");
  $("redrive-count").textContent = `${task.moved} / ${task.to_move}`;
  $("redrive-progress").dataset.status = task.status;
  if (task.status === "running") state.redriveTimer = setTimeout(showLatestRedrive, REDRIVE_POLL_MS);
  else await browse();
}

// ---- wiring ------------------------------------------------------------------------------------------------

function closeOnCancel(dialogId, buttonId) {
  $(buttonId).addEventListener("click", () => $(dialogId).close());
}

function start() {
  $("queue-filter").addEventListener("input", renderQueues);
  $("detail-close").addEventListener("click", closeDetail);
  $("browse-refresh").addEventListener("click", () => browse());
  $("browse-state").addEventListener("change", () => browse());
  $("browse-more").addEventListener("click", () => browse({ more: true }));
  $("send-open").addEventListener("click", openSend);
  $("send-form").addEventListener("submit", submitSend);
  $("purge-open").addEventListener("click", openPurge);
  $("purge-form").addEventListener("submit", submitPurge);
  $("redrive-open").addEventListener("click", openRedrive);
  $("redrive-form").addEventListener("submit", submitRedrive);
  closeOnCancel("send-dialog", "send-cancel");
  closeOnCancel("purge-dialog", "purge-cancel");
  closeOnCancel("redrive-dialog", "redrive-cancel");
  $("metrics-link").addEventListener("click", showMetrics);
  $("create-open").addEventListener("click", openCreate);
  $("create-form").addEventListener("submit", submitCreate);
  $("delete-open").addEventListener("click", openDelete);
  $("delete-form").addEventListener("submit", submitDelete);
  $("settings-open").addEventListener("click", openSettings);
  $("settings-form").addEventListener("submit", submitSettings);
  closeOnCancel("create-dialog", "create-cancel");
  closeOnCancel("delete-dialog", "delete-cancel");
  closeOnCancel("settings-dialog", "settings-cancel");
  for (const th of document.querySelectorAll("[data-sort]")) {
    th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.sort));
  }
  window.addEventListener("hashchange", selectFromUrl);
  $("chart-separate").addEventListener("change", drawDetailChart);
  poll();
}

start();
