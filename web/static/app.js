// corral's web page: a chat playground over /v1/chat/completions and a
// live view fed by the server-sent events of /v1/live, both read with
// fetch so that an API key goes with them. Vanilla JavaScript, no
// dependencies.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + " " + units[i];
}

function num(n, digits) {
  return n.toLocaleString(undefined, { maximumFractionDigits: digits ?? 0 });
}

// count is "1 request", "2 requests".
function count(n, what) {
  return `${num(n)} ${what}${n === 1 ? "" : "s"}`;
}

// ---- API key ----
//
// A server with API keys answers 401 to a call without a valid one. The
// page then asks for a key (#key-form), keeps it in sessionStorage (it goes
// with the tab) and sends it as "Authorization: Bearer KEY" on every call.
// A server without keys never answers 401: the form never shows.

const keyStorage = "corral-api-key";

const auth = {
  key: storedKey(), // "" when none
  waiters: [],      // the functions that resume the calls waiting for a key
};

// storedKey is the tab's key, "" when it has none (or the browser keeps no
// session storage).
function storedKey() {
  try { return sessionStorage.getItem(keyStorage) || ""; } catch { return ""; }
}

function setKey(key) {
  auth.key = key;
  try {
    if (key) sessionStorage.setItem(keyStorage, key);
    else sessionStorage.removeItem(keyStorage);
  } catch { /* no session storage: the key lives as long as the page */ }
  $("forget-key").hidden = !key;
}

// askForKey shows the key form and resolves once a key is given; it
// rejects with the signal's reason when signal (optional) aborts first.
function askForKey(refused, signal) {
  const form = $("key-form");
  if (form.hidden) {
    const msg = $("key-message");
    msg.textContent = refused ? "The server refused that key." : "This server needs an API key.";
    msg.dataset.state = refused ? "refused" : "";
    form.hidden = false;
    $("api-key").focus();
  }
  return new Promise((resolve, reject) => {
    if (signal && signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      auth.waiters = auth.waiters.filter((w) => w !== resume);
      reject(signal.reason);
    };
    const resume = () => {
      if (signal) signal.removeEventListener("abort", onAbort);
      resolve();
    };
    if (signal) signal.addEventListener("abort", onAbort, { once: true });
    auth.waiters.push(resume);
  });
}

function useKey() {
  const input = $("api-key");
  const key = input.value.trim();
  if (!key) return;
  if (!/^[\x21-\x7e]+$/.test(key)) {
    // A header carries nothing else, and a key has no spaces.
    const msg = $("key-message");
    msg.textContent = "An API key is printable ASCII without spaces.";
    msg.dataset.state = "refused";
    return;
  }
  input.value = "";
  $("key-form").hidden = true;
  setKey(key);
  const waiters = auth.waiters;
  auth.waiters = [];
  for (const resume of waiters) resume();
}

function forgetKey() {
  setKey("");
  restartLive(); // its stream went out with the key
}

// authFetch is fetch with the page's key, if it has one.
function authFetch(path, init = {}) {
  const headers = new Headers(init.headers);
  if (auth.key) headers.set("Authorization", "Bearer " + auth.key);
  return fetch(path, { ...init, headers });
}

// keyRefused follows a 401 to a call sent with key ("" for none): unless
// another call brought a new key meanwhile, the page forgets the key and
// asks for one. The call then tries again.
async function keyRefused(key, signal) {
  if (key !== auth.key) return;
  if (key) setKey("");
  await askForKey(key !== "", signal);
}

// call is authFetch that, while the server answers 401, asks for a key
// and tries again with it; init.signal aborts the wait too.
async function call(path, init = {}) {
  for (;;) {
    const key = auth.key;
    const resp = await authFetch(path, init);
    if (resp.status !== 401) return resp;
    await keyRefused(key, init.signal);
  }
}

// ---- Chat playground ----

const chat = {
  history: [],      // {role, content} of the conversation so far
  controller: null, // the AbortController of the answer streaming now
};

// models tracks the model menu's loads, one at a time, so that the
// page's first load and the live view's first snapshot (or a key given
// to both) do not fetch the list twice.
const models = {
  loading: false, // a load runs now
  loaded: null,   // modelKey of the list the last load got
  wanted: null,   // modelKey of the list the last live snapshot showed
};

// modelKey identifies a model list by its ids and states, in order.
function modelKey(list) {
  return list.map((m) => m.id + ":" + m.state).join(",");
}

// modelsShown follows the model list of a live snapshot: when it changes,
// the menu loads again, unless the list loaded (or loading) already is it.
function modelsShown(key) {
  if (key === models.wanted) return;
  models.wanted = key;
  if (!models.loading && key !== models.loaded) loadModels();
}

async function loadModels() {
  const select = $("model");
  const keep = select.value;
  const asked = models.wanted;
  models.loading = true;
  try {
    const resp = await call("/v1/models");
    if (!resp.ok) throw new Error("GET /v1/models: " + resp.status);
    const body = await resp.json();
    const list = body.data || [];
    select.replaceChildren();
    for (const m of list) {
      const opt = el("option", "", m.state && m.state !== "loaded" ? `${m.id} (${m.state})` : m.id);
      opt.value = m.id;
      select.append(opt);
    }
    if (keep && [...select.options].some((o) => o.value === keep)) select.value = keep;
    models.loaded = modelKey(list);
  } catch (err) {
    console.error(err);
  } finally {
    models.loading = false;
  }
  // A snapshot showed another list meanwhile: load it. Once per change,
  // so a list that never matches cannot loop.
  if (models.wanted !== asked && models.wanted !== models.loaded) loadModels();
}

function addMessage(role, text) {
  const box = el("div", "msg " + role);
  box.append(el("div", "text", text));
  const meta = el("div", "meta");
  box.append(meta);
  $("messages").append(box);
  box.scrollIntoView({ block: "end" });
  return box;
}

// numberParam returns the input's value as a number, undefined when empty.
function numberParam(id) {
  const v = $(id).value.trim();
  return v === "" ? undefined : Number(v);
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...chat.history);
  const body = {
    model: $("model").value,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: numberParam("temperature"),
    max_tokens: numberParam("max-tokens"),
    top_p: numberParam("top-p"),
    seed: numberParam("seed"),
  };
  if ($("ignore-eos").checked) body.ignore_eos = true;
  return body;
}

// sseEvents yields the data of each server-sent event of a fetch
// response's body, read as a stream.
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, ""));
      if (data.length > 0) yield data.join("\n");
    }
  }
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function send() {
  const prompt = $("prompt").value;
  if (!prompt.trim() || chat.controller) return;
  $("prompt").value = "";
  chat.history.push({ role: "user", content: prompt });
  addMessage("user", prompt);
  const box = addMessage("assistant", "");
  box.dataset.state = "waiting";
  const text = box.querySelector(".text");
  const meta = box.querySelector(".meta");
  meta.textContent = "waiting…";

  const controller = new AbortController();
  chat.controller = controller;
  setBusy(true);
  const start = performance.now();
  let first = 0, last = 0, chunks = 0, answer = "", usage = null, finish = null;
  try {
    const resp = await call("/v1/chat/completions", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(requestBody()),
      signal: controller.signal,
    });
    if (!resp.ok) {
      let msg = resp.status + " " + resp.statusText;
      try { msg = (await resp.json()).error.message || msg; } catch { /* not JSON */ }
      throw new Error(msg);
    }
    box.dataset.state = "streaming";
    for await (const data of sseEvents(resp.body)) {
      if (data === "[DONE]") break;
      const ev = JSON.parse(data);
      if (ev.error) throw new Error(ev.error.message || JSON.stringify(ev.error));
      if (ev.usage) usage = ev.usage;
      const choice = (ev.choices || [])[0];
      if (!choice) continue;
      const piece = choice.delta && choice.delta.content;
      if (piece) {
        const now = performance.now();
        if (!first) first = now;
        last = now;
        chunks++;
        answer += piece;
        text.textContent = answer;
        meta.textContent = `${chunks} chunks…`;
        box.scrollIntoView({ block: "end" });
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    box.dataset.state = "done";
  } catch (err) {
    if (err.name === "AbortError") {
      box.dataset.state = "stopped";
      finish = "stopped";
    } else {
      box.dataset.state = "error";
      box.classList.add("error");
      meta.textContent = String(err.message || err);
    }
  } finally {
    chat.controller = null;
    setBusy(false);
  }
  if (answer) chat.history.push({ role: "assistant", content: answer });
  if (box.dataset.state !== "error") meta.textContent = answerMeta(usage, chunks, start, first, last, finish);
}

// answerMeta describes an answer: its tokens (from the usage chunk; an
// answer stopped early has none, and shows its chunks instead), speed and
// time to first token.
function answerMeta(usage, chunks, start, first, last, finish) {
  const parts = [];
  let n = chunks;
  if (usage) {
    n = usage.completion_tokens;
    parts.push(`${usage.prompt_tokens} prompt tokens` +
      (usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens
        ? ` (${usage.prompt_tokens_details.cached_tokens} cached)` : ""));
    parts.push(`${n} tokens`);
  } else {
    parts.push(`${chunks} chunks`);
  }
  if (first) {
    parts.push(`TTFT ${num(first - start)} ms`);
    // The first token's time is TTFT: speed counts the tokens after it.
    if (n > 1 && last > first) parts.push(`${num((n - 1) / ((last - first) / 1000), 1)} tokens/s`);
  }
  if (finish) parts.push(finish);
  return parts.join(" · ");
}

function stop() {
  if (chat.controller) chat.controller.abort();
}

function clearChat() {
  stop();
  chat.history = [];
  $("messages").replaceChildren();
}

// ---- Live view ----

const live = {
  points: [],              // {t, tps, ttft} of the periodic snapshots
  maxWindowMs: 5 * 60 * 1000, // charts show at most the last five minutes,
  minWindowMs: 30 * 1000,     // and at least 30 s, growing as points come
  controller: null,        // aborts the stream's loop (watchLive)
  retryMs: [1000, 30000],  // reconnection delay: the first, doubling up to the last
};

const slotStates = { idle: "idle", prefill: "prefill", decode: "decoding", paused: "paused" };

function renderSummary(snap) {
  const s = $("summary");
  s.replaceChildren();
  const loaded = snap.models.filter((m) => m.state === "loaded").length;
  s.append(el("span", "", `status: ${snap.status}`));
  s.append(el("span", "", `models loaded: ${loaded} of ${snap.models.length}`));
  const mem = el("span", "", "memory: ");
  if (snap.memory.budget_bytes > 0) {
    const meter = el("meter");
    meter.min = 0;
    meter.max = snap.memory.budget_bytes;
    meter.value = snap.memory.used_bytes;
    mem.append(meter, ` ${bytes(snap.memory.used_bytes)} of ${bytes(snap.memory.budget_bytes)}`);
  } else {
    mem.append(`${bytes(snap.memory.used_bytes)} (no budget)`);
  }
  s.append(mem);
  if (snap.waiting_for_memory > 0) s.append(el("span", "", `waiting for memory: ${snap.waiting_for_memory}`));
}

function renderModels(snap) {
  const box = $("models");
  box.replaceChildren();
  for (const m of snap.models) {
    const card = el("div", "model");
    card.dataset.model = m.id;
    const head = el("div", "model-head");
    head.append(el("span", "name", m.id));
    const badge = el("span", "badge", m.state);
    badge.dataset.state = m.state;
    head.append(badge);
    const holding = `${count(m.requests, "request")} holding it`;
    head.append(el("span", "info", m.memory_bytes > 0 ? `${bytes(m.memory_bytes)} · ${holding}` : holding));
    card.append(head);
    if (m.error) card.append(el("div", "error", m.error));
    if (m.slots.length > 0) {
      const kv = el("div", "info", "KV cache ");
      const meter = el("meter");
      meter.min = 0;
      meter.max = m.kv_total || 1;
      meter.value = m.kv_used;
      meter.title = `${num(m.kv_active)} cells for running requests, ${num(m.kv_used - m.kv_active)} for cached prefixes, ${num(m.kv_total - m.kv_used)} free`;
      kv.append(meter, ` ${num(m.kv_active)} active + ${num(m.kv_used - m.kv_active)} cached / ${num(m.kv_total)} cells · host ${bytes(m.host_bytes)}, ${count(m.host_hits, "hit")}${m.disk_bytes || m.disk_hits ? ` · disk ${bytes(m.disk_bytes)}, ${count(m.disk_hits, "hit")}` : ""} · ${count(m.tokens_out, "token")} out · ${count(m.requests_done, "request")} done`);
      card.append(kv);
      const slots = el("div", "slots");
      for (const s of m.slots) {
        const d = el("div", "slot");
        d.dataset.slot = s.id;
        d.dataset.state = s.state;
        d.append(el("div", "state", `slot ${s.id} · ${slotStates[s.state] || s.state}`));
        d.append(el("div", "detail", `${num(s.cached_tokens)} / ${num(s.n_ctx)} tokens cached`));
        d.append(el("div", "detail", s.request_id ? `request #${s.request_id} · ${num(s.decoded)} generated` : "no request"));
        slots.append(d);
      }
      card.append(slots);
      const q = el("div", "queue");
      q.dataset.depth = m.queue_depth;
      q.textContent = m.queue.length === 0
        ? `queue: ${m.queue_depth === 0 ? "empty" : m.queue_depth + " arriving"}`
        : "queue: " + m.queue.map((c) => `priority ${c.priority}: ${c.queued} queued` +
          (c.preempted ? `, ${c.preempted} preempted` : "")).join(" · ");
      card.append(q);
    }
    box.append(card);
  }
  modelsShown(modelKey(snap.models));
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

// drawChart draws the points' values (null: none), as a line with its
// area or as bars, from the oldest point kept (at least live.minWindowMs
// ago) to now, scaled to the largest value.
function drawChart(id, key, now, bars) {
  const chart = $(id);
  const W = 300, H = 80, top = 10;
  const pts = live.points.filter((p) => p[key] !== null && p[key] !== undefined);
  const max = Math.max(1, ...pts.map((p) => p[key]));
  const span = live.points.length > 0 ? now - live.points[0].t : 0;
  const windowMs = Math.min(live.maxWindowMs, Math.max(live.minWindowMs, span));
  const x = (t) => W - ((now - t) / windowMs) * W;
  const y = (v) => H - (v / max) * (H - top);
  chart.replaceChildren();
  for (const f of [0.5, 1]) chart.append(svg("line", { class: "grid", x1: 0, x2: W, y1: y(max * f), y2: y(max * f) }));
  if (bars) {
    for (const p of pts) {
      chart.append(svg("rect", { class: "bar", x: (x(p.t) - 2).toFixed(1), y: y(p[key]).toFixed(1), width: 3, height: (H - y(p[key])).toFixed(1) }));
    }
  } else if (pts.length > 0) {
    const line = pts.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(" ");
    const first = x(pts[0].t).toFixed(1), lastX = x(pts[pts.length - 1].t).toFixed(1);
    chart.append(svg("polygon", { class: "area", points: `${first},${H} ${line} ${lastX},${H}` }));
    chart.append(svg("polyline", { class: "line", points: line }));
  }
  const label = svg("text", { x: 3, y: top });
  label.textContent = num(max, 1);
  chart.append(label);
}

function renderCharts(snap) {
  if (snap.rate) {
    const ttft = snap.rate.ttft_ms === undefined ? null : snap.rate.ttft_ms;
    live.points.push({ t: snap.time, tps: snap.rate.tokens_per_second, ttft });
    $("tps-now").textContent = num(snap.rate.tokens_per_second, 1);
    if (ttft !== null) $("ttft-now").textContent = num(ttft, 1);
  }
  while (live.points.length > 0 && live.points[0].t < snap.time - live.maxWindowMs) live.points.shift();
  drawChart("chart-tps", "tps", snap.time);
  drawChart("chart-ttft", "ttft", snap.time, true);
}

function setConn(state, text) {
  const c = $("conn");
  c.dataset.state = state;
  c.textContent = text;
}

function setLiveNote(text) {
  const note = $("live-note");
  note.textContent = text;
  note.hidden = !text;
}

function showSnapshot(snap) {
  setConn(snap.status === "ok" ? "live" : "error", snap.status === "ok" ? "live" : snap.status);
  renderSummary(snap);
  renderModels(snap);
  renderCharts(snap);
}

// clearLive empties the live view, whose data came with another key.
function clearLive() {
  live.points = [];
  models.wanted = null; // the next snapshot loads the menu again:
  models.loaded = null; // the list may differ with another key
  for (const id of ["summary", "models", "chart-tps", "chart-ttft", "tps-now", "ttft-now"]) $(id).replaceChildren();
}

// sleep resolves after ms, or rejects with the signal's reason when signal
// aborts first.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const onAbort = () => { clearTimeout(timer); reject(signal.reason); };
    const timer = setTimeout(() => { signal.removeEventListener("abort", onAbort); resolve(); }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

// watchLive reads the server-sent events of /v1/live with fetch (an
// EventSource cannot send the key) until signal aborts. A stream that
// drops, or a connection that fails, is opened again after a delay that
// doubles from live.retryMs[0] up to live.retryMs[1]. A 401 asks for a
// key and tries again with it; a 403 for want of an admin key shows a note
// instead of the view; other refusals (4xx, 503 while the server shuts
// down) end the loop: "disconnected".
async function watchLive(signal) {
  let delay = live.retryMs[0];
  while (!signal.aborted) {
    const key = auth.key;
    let resp = null;
    try {
      resp = await authFetch("/v1/live", { headers: { Accept: "text/event-stream" }, signal });
    } catch {
      // No connection: try again below.
    }
    if (signal.aborted) return;
    if (resp && resp.status === 401) {
      setConn("error", "waiting for a key");
      try { await keyRefused(key, signal); } catch { return; }
      continue;
    }
    if (resp && (resp.status === 503 || (resp.status >= 400 && resp.status < 500))) {
      await liveRefused(resp, signal);
      return;
    }
    if (resp && resp.ok) {
      setLiveNote("");
      $("live-view").hidden = false;
      setConn("live", "live");
      try {
        for await (const data of sseEvents(resp.body)) {
          delay = live.retryMs[0]; // the stream works: after a drop, try again soon
          try {
            showSnapshot(JSON.parse(data));
          } catch (err) {
            console.error(err);
          }
        }
      } catch {
        // The stream dropped: try again below.
      }
      if (signal.aborted) return;
    }
    setConn("error", "reconnecting…");
    try { await sleep(delay, signal); } catch { return; }
    delay = Math.min(2 * delay, live.retryMs[1]);
  }
}

// liveRefused shows why the server refused the live stream.
async function liveRefused(resp, signal) {
  let e = {};
  try { e = (await resp.json()).error || {}; } catch { /* not JSON */ }
  if (signal.aborted) return;
  if (resp.status === 403 && e.code === "admin_required") {
    clearLive();
    $("live-view").hidden = true;
    setConn("idle", "chat only");
    setLiveNote("The server view needs an admin API key. This key may use the chat playground; " +
      "to watch the server, forget it and enter an admin key.");
    return;
  }
  setConn("error", "disconnected");
  if (resp.status !== 503) setLiveNote(`GET /v1/live: ${e.message || resp.status + " " + resp.statusText}`);
}

// restartLive (re)starts the live view's stream.
function restartLive() {
  if (live.controller) {
    live.controller.abort();
    clearLive();
  }
  live.controller = new AbortController();
  setConn("connecting", "connecting…");
  watchLive(live.controller.signal);
}

// ---- Wiring ----

document.addEventListener("DOMContentLoaded", () => {
  $("chat-form").addEventListener("submit", (e) => { e.preventDefault(); send(); });
  $("stop").addEventListener("click", stop);
  $("clear").addEventListener("click", clearChat);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); }
  });
  $("key-form").addEventListener("submit", (e) => { e.preventDefault(); useKey(); });
  $("forget-key").addEventListener("click", forgetKey);
  $("forget-key").hidden = !auth.key;
  loadModels();
  restartLive();
});
