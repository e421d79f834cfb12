// The cronledger console: one page over the same JSON API the command line uses.
// Every request is same-origin, and every one that changes something sends
// Content-Type: application/json. Nothing is loaded from anywhere else.
"use strict";

const API = "/api/v1/admin";
const STRIP = 60; // occurrences per channel timeline, and how many more "older" shows
const AHEAD = 10; // pending cells drawn after "now"
const MISFIRES = 1000; // the newest misfire summaries over all channels, read once a refresh
const PREVIEW = 100; // instants read (once per channel version and day) to mark its fire days
const REFRESH_MS = 3000;
const STATUSES = ["completed", "failed", "skipped_misfire", "skipped_singleton", "running", "claimed", "pending", "cancelled"];
const EVENTS = 20; // recent events in a channel's panel
// A delivered alert stays open until a completed occurrence answers it: the row says so.
const ALERTS = { "occurrence.failed": "failed", "occurrence.abandoned": "abandoned", "occurrence.overdue": "overdue", "channel.stalled": "stalled" };
const state = {
  channels: [], strips: new Map(), totals: new Map(), depth: new Map(), misfires: new Map(),
  status: new Map(), alerts: new Map(), selected: null, panel: null, utc: true, busy: null,
  fireDays: new Map(), // channel_id → { asked: version@day, days: Set of UTC dates, until: last instant read }
  view: { search: "", labels: [], filter: "", sort: "name" },
};

const $ = (selector) => document.querySelector(selector);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child !== undefined && child !== null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

async function api(method, path, body) {
  const options = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    if (body !== undefined) options.body = JSON.stringify(body);
  }
  const response = await fetch(path.startsWith("/") ? path : `${API}/${path}`, options);
  const text = await response.text();
  let answer = null;
  try { answer = text ? JSON.parse(text) : null; } catch (_) { answer = { error: { message: text } }; }
  if (!response.ok) {
    const error = (answer && answer.error) || {};
    const details = (error.details || []).map((d) => `${d.path}: ${d.message}`).join("; ");
    throw new Error(`${response.status} ${error.message || response.statusText}${details ? ` (${details})` : ""}`);
  }
  return answer;
}

// --- time ------------------------------------------------------------------------------------

function time(value) {
  if (!value) return "–";
  const at = new Date(value);
  if (state.utc) return at.toISOString().replace(".000Z", "Z").replace("T", " ");
  return at.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

function span(ms) {
  const abs = Math.abs(ms);
  const units = [["d", 86400000], ["h", 3600000], ["min", 60000]];
  for (const [unit, size] of units) {
    if (abs >= size) {
      const amount = abs / size;
      return `${amount >= 10 ? amount.toFixed(0) : amount.toFixed(1).replace(/\.0$/, "")} ${unit}`;
    }
  }
  return abs >= 1000 ? `${(abs / 1000).toFixed(1)} s` : `${Math.round(abs)} ms`;
}

function relative(value) {
  if (!value) return "";
  const delta = new Date(value).getTime() - Date.now();
  return delta >= 0 ? `in ${span(delta)}` : `${span(delta)} ago`;
}

// One formatter per zone: making one costs far more than using it, and every redraw asks
// for 62 offsets per channel.
const offsetFormats = new Map();
function offsetFormat(zone) {
  if (!offsetFormats.has(zone)) {
    offsetFormats.set(zone, new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" }));
  }
  return offsetFormats.get(zone);
}

// The UTC offset of `zone` at `at`, in minutes ("GMT+01:00" → 60).
function offset(zone, at) {
  const part = offsetFormat(zone).formatToParts(at).find((p) => p.type === "timeZoneName").value;
  const match = /GMT([+-])(\d\d):(\d\d)/.exec(part);
  return match ? (match[1] === "-" ? -1 : 1) * (Number(match[2]) * 60 + Number(match[3])) : 0;
}

// The next 31 days in `zone`, each with whether its clocks change (a DST day).
function comingDays(zone) {
  const days = [];
  const start = new Date();
  start.setUTCHours(0, 0, 0, 0);
  for (let i = 0; i < 31; i += 1) {
    const from = new Date(start.getTime() + i * 86400000);
    const to = new Date(from.getTime() + 86400000);
    let before = 0, after = 0;
    try { before = offset(zone, from); after = offset(zone, to); } catch (_) { /* unknown zone */ }
    days.push({ date: from, change: after - before });
  }
  return days;
}

// --- rendering -------------------------------------------------------------------------------

// The cron expression, or "at <local time>" for a one-time schedule; "(ended)" once nothing is left.
function scheduleOf(compiled) {
  const text = compiled.schedule || (compiled.at ? `at ${compiled.at}` : "");
  return text && compiled.ended ? `${text} (ended)` : text;
}

// What a channel is, as an operator reads it: an active channel with no instant left has ended.
function statusOf(channel) {
  const ended = (channel.compiled && channel.compiled.ended) || (state.status.get(channel.channel_id) || {}).ended;
  return channel.status === "active" && ended ? "ended" : channel.status;
}

// Failing now: its latest run failed, or an alert is open until a run completes.
function failing(channel) {
  const row = state.status.get(channel.channel_id);
  if (row) return row.last_status === "failed" || Boolean(row.open_alert);
  const last = lastRun(state.strips.get(channel.channel_id) || []);
  return Boolean(last && last.status === "failed") || state.alerts.has(channel.channel_id);
}

function badge(status) {
  return el("span", { class: `badge ${status || ""}` }, status || "–");
}

function misfireCount(o) {
  const match = /skipped (\d+) missed/.exec(o.error_message || "");
  return match ? Number(match[1]) : null;
}

function cell(o, extra = "") {
  const missed = o.status === "skipped_misfire" ? misfireCount(o) : null;
  const title = [`${o.status} · ${o.trigger} · ${time(o.scheduled_for)}`, o.error_message].filter(Boolean).join("\n");
  return el("button", {
    class: `cell ${STATUSES.includes(o.status) ? o.status : "unknown"}${extra}${state.selected === o.id ? " selected" : ""}`,
    title,
    dataset: { id: o.id, status: o.status, at: o.scheduled_for },
    onclick: (event) => { event.stopPropagation(); showOccurrence(o.id); },
  }, missed === null ? (o.status === "skipped_misfire" ? "missed" : "") : `${missed} missed`);
}

// The axis: a tick where the strip's times cross a round step, the step chosen so that ticks
// fall some eight cells apart whatever the channel's period (seconds for a 5 s channel, days
// for a nightly one).
const STEPS = [1, 5, 15, 30, 60, 300, 900, 1800, 3600, 10800, 21600, 43200, 86400, 604800, 2592000].map((s) => s * 1000);

function tickLabel(at, step) {
  const iso = state.utc ? at.toISOString() : new Date(at.getTime() - at.getTimezoneOffset() * 60000).toISOString();
  if (step >= 86400000) return iso.slice(5, 10);
  return step < 60000 ? iso.slice(11, 19) : iso.slice(11, 16);
}

function withTicks(rows, cells) {
  if (rows.length < 2) return cells;
  const times = rows.map((o) => new Date(o.scheduled_for).getTime());
  const wanted = ((times[times.length - 1] - times[0]) / (rows.length - 1)) * 8;
  const step = STEPS.filter((s) => s <= wanted).pop() || STEPS[0];
  const out = [];
  let last = -Infinity;
  rows.forEach((o, i) => {
    // Not in the last two cells: a label there would hang past the newest end.
    if (i > 0 && i < rows.length - 2 && Math.floor(times[i] / step) !== Math.floor(times[i - 1] / step) && i - last >= 5) {
      const at = new Date(Math.floor(times[i] / step) * step);
      out.push(el("span", { class: "tick", title: time(at.toISOString()), dataset: { at: at.toISOString() } },
        el("span", { class: "tick-label" }, tickLabel(at, step))));
      last = i;
    }
    out.push(cells[i]);
  });
  return out;
}

// Misfire summaries older than the rows the strip holds: pinned at its left, so an outage's
// summary is never pushed out of sight by the runs after it.
function pinnedSummaries(channel, rows) {
  const oldest = rows.length ? new Date(rows[0].scheduled_for).getTime() : Infinity;
  const more = (state.totals.get(channel.channel_id) || 0) > rows.length;
  return (state.misfires.get(channel.channel_id) || [])
    .filter((o) => more && new Date(o.scheduled_for).getTime() < oldest)
    .slice(0, 3).reverse();
}

function olderButton(channel, loaded) {
  const total = state.totals.get(channel.channel_id) || 0;
  if (total <= loaded) return null;
  return el("button", {
    class: "older", title: `${total - loaded} older runs: show ${STRIP} more`,
    onclick: (event) => { event.stopPropagation(); loadOlder(channel.channel_id); },
  }, `‹ ${total - loaded}`);
}

function timeline(channel, strip) {
  const zone = (channel.compiled && channel.compiled.timezone) || "UTC";
  const rows = strip.slice().reverse(); // oldest first
  const past = rows.filter((o) => new Date(o.scheduled_for).getTime() <= Date.now() || o.status !== "pending");
  const ahead = rows.filter((o) => !past.includes(o));
  const pinned = pinnedSummaries(channel, past);
  const fires = fireDays(channel);
  const days = comingDays(zone).map((d) => {
    const date = d.date.toISOString().slice(0, 10);
    // Past the last instant read (a busy schedule's hundredth), a day is "likely", not known.
    const fire = !fires ? "" : fires.days.has(date) ? " fire" : fires.until && date > fires.until ? " fire likely" : "";
    return el("span", {
      class: `day${d.change ? " dst" : ""}${fire}`,
      title: `${date}${d.change ? ` · ${zone}: clocks go ${d.change > 0 ? "forward" : "back"} ${Math.abs(d.change)} min` : ""}${fire ? (fire.includes("likely") ? " · fires (beyond the preview)" : " · fires") : ""}`,
      dataset: { ...(d.change ? { dst: date } : {}), ...(fire === " fire" ? { fire: date } : {}) },
    });
  });
  const ended = statusOf(channel) === "ended";
  return el("div", { class: "timeline", dataset: { channel: channel.name, id: channel.channel_id } },
    pinned.length ? el("span", { class: "pinned", title: "misfire summaries older than the runs shown" },
      pinned.map((o) => el("span", { class: "pin" }, cell(o, " pinned"),
        el("span", { class: "tick-label" }, relative(o.scheduled_for)))),
      el("span", { class: "gap", title: "runs not shown" }, "⋯")) : null,
    el("div", { class: "past", onscroll: (event) => markClipped(event.currentTarget) },
      el("div", { class: "track" }, olderButton(channel, past.length), withTicks(past, past.map((o) => cell(o))))),
    el("span", { class: "now", title: "now" }),
    el("span", { class: "ahead" }, ahead.slice(0, AHEAD).map((o) => cell(o)),
      ahead.length > AHEAD ? el("span", { class: "muted more" }, `+${ahead.length - AHEAD}`) : null,
      ended ? el("span", { class: "muted ended-note" }, "no instant left")
        : el("span", { class: "days", title: `the next 31 days in ${zone}` }, days)));
}

// The days a channel fires on, from its preview: read once per version and day, in the
// background (a page of 200 channels asks for them a few at a time, never on every refresh).
function fireDays(channel) {
  if (channel.status !== "active") return null;
  const key = `${channel.version}@${new Date().toISOString().slice(0, 10)}`;
  const known = state.fireDays.get(channel.channel_id) || {};
  if (known.asked !== key) wantPreview(channel.channel_id, key);
  return known.days ? known : null;
}

const previewQueue = [];
let previewsRunning = 0;
function wantPreview(channelId, key) {
  state.fireDays.set(channelId, { ...(state.fireDays.get(channelId) || {}), asked: key });
  previewQueue.push([channelId, key]);
  while (previewsRunning < 3 && previewQueue.length) readPreview(...previewQueue.shift());
}

async function readPreview(channelId, key) {
  previewsRunning += 1;
  try {
    const preview = (await api("GET", `channels/${enc(channelId)}/preview?count=${PREVIEW}`)).data;
    const dates = preview.instants.map((i) => i.utc.slice(0, 10));
    const full = preview.instants.length === PREVIEW;
    state.fireDays.set(channelId, { asked: key, days: new Set(dates), until: full ? dates[dates.length - 1] : null });
  } catch (_) {
    state.fireDays.set(channelId, { asked: key, days: null });
  } finally {
    previewsRunning -= 1;
    if (previewQueue.length) readPreview(...previewQueue.shift());
    else redrawSoon();
  }
}

let redrawTimer = null;
function redrawSoon() {
  clearTimeout(redrawTimer);
  redrawTimer = setTimeout(render, 50);
}

// A misfire summary scrolled past either edge sticks to that edge (CSS `position: sticky`);
// marked so that a stuck cell does not read as the newest or the oldest.
function markClipped(scroller) {
  const box = scroller.getBoundingClientRect();
  for (const summary of scroller.querySelectorAll(".cell.skipped_misfire")) {
    // Where it would be unstuck: beside its neighbours (2 px apart), which do not stick.
    const width = summary.getBoundingClientRect().width;
    const before = summary.previousElementSibling, after = summary.nextElementSibling;
    const left = after ? after.getBoundingClientRect().left - 2 - width
      : before ? before.getBoundingClientRect().right + 2 : box.left;
    summary.classList.toggle("clipped", left < box.left - 1 || left + width > box.right + 1);
  }
}

function lastRun(strip) {
  const now = Date.now();
  return strip.find((o) => new Date(o.scheduled_for).getTime() <= now && o.status !== "pending") || null;
}

function alertBadge(channel) {
  const kind = state.alerts.get(channel.channel_id);
  if (!kind) return null;
  return el("span", {
    class: "badge alert",
    title: `open alert: ${kind}, until a run of ${channel.name} completes`,
    dataset: { alert: kind },
    onclick: () => showChannel(channel.channel_id),
  }, `⚠ ${ALERTS[kind] || kind}`);
}

function setStatus(channel, status, done) {
  return () => act(`channels/${enc(channel.channel_id)}/status`, "PATCH", { status }, `${done} ${channel.name}`);
}

// Active → Pause; paused → Resume; a draft was never active → Activate; ended or archived: none.
function toggleButton(channel) {
  const shown = statusOf(channel);
  if (shown === "active") return el("button", { class: "act", onclick: setStatus(channel, "paused", "paused") }, "Pause");
  if (shown === "paused") return el("button", { class: "act", onclick: setStatus(channel, "active", "resumed") }, "Resume");
  if (shown === "draft") return el("button", { class: "act", onclick: setStatus(channel, "active", "activated") }, "Activate");
  return null;
}

// A channel's labels as chips; a click adds the label to the label filter.
function labelChips(channel) {
  const labels = Object.entries(channel.labels || {}).sort(([a], [b]) => a.localeCompare(b));
  if (!labels.length) return null;
  return el("div", { class: "labels" }, labels.map(([key, value]) =>
    el("span", { class: "label mono", title: "show only channels with this label", onclick: () => addLabel(key, value) }, `${key}=${value}`)));
}

function addLabel(key, value) {
  const input = $("#labels");
  const terms = input.value.split(",").map((t) => t.trim()).filter(Boolean);
  if (!terms.includes(`${key}=${value}`)) terms.push(`${key}=${value}`);
  input.value = terms.join(",");
  input.dispatchEvent(new Event("input"));
}

// A selector as the API reads one: `key=value` terms joined by commas, every one required;
// a term without `=` asks only that the key be there.
function selectorOf(text) {
  return text.split(",").map((t) => t.trim()).filter(Boolean).map((term) => {
    const at = term.indexOf("=");
    return at < 0 ? [term, null] : [term.slice(0, at).trim(), term.slice(at + 1).trim()];
  });
}

function carries(channel, selector) {
  const labels = channel.labels || {};
  return selector.every(([key, value]) => Object.hasOwn(labels, key) && (value === null || labels[key] === value));
}

function channelRow(channel) {
  const strip = state.strips.get(channel.channel_id) || [];
  const compiled = channel.compiled || {};
  const last = lastRun(strip);
  return el("tr", { class: `channel${state.selected === channel.channel_id ? " selected" : ""}`, dataset: { channel: channel.name } },
    el("td", { class: "who" },
      el("div", {}, el("span", { class: "name", onclick: () => showChannel(channel.channel_id) }, channel.name), " ", badge(statusOf(channel)), " ", alertBadge(channel)),
      el("div", { class: "mono muted schedule", title: compiled.timezone || "" }, scheduleOf(compiled) || "(invalid)", compiled.timezone && compiled.timezone !== "UTC" ? ` · ${compiled.timezone}` : ""),
      labelChips(channel)),
    el("td", { class: "next", title: time(compiled.next_fire_at) },
      el("div", {}, compiled.next_fire_at ? relative(compiled.next_fire_at) : el("span", { class: "muted" }, "–")),
      el("div", { class: "last" }, last ? badge(last.status) : el("span", { class: "muted" }, "–"))),
    el("td", { class: "strip" }, timeline(channel, strip)),
    el("td", { class: "actions" },
      el("button", { class: "act primary", disabled: channel.status !== "active", onclick: () => act(`channels/${enc(channel.channel_id)}/trigger`, "POST", undefined, `triggered ${channel.name}`) }, "Trigger"),
      toggleButton(channel)));
}

// --- search, filter, sort --------------------------------------------------------------------

const SORTS = {
  name: (a, b) => a.name.localeCompare(b.name),
  next: (a, b) => when(a, "next") - when(b, "next") || SORTS.name(a, b),
  last: (a, b) => when(b, "last") - when(a, "last") || SORTS.name(a, b),
  failing: (a, b) => Number(failing(b)) - Number(failing(a)) || SORTS.name(a, b),
};

function when(channel, which) {
  if (which === "next") {
    const at = channel.compiled && channel.compiled.next_fire_at;
    return at ? new Date(at).getTime() : Infinity;
  }
  const last = lastRun(state.strips.get(channel.channel_id) || []);
  return last ? new Date(last.scheduled_for).getTime() : -Infinity;
}

function wanted(channel) {
  const { search, labels, filter } = state.view;
  if (search && !channel.name.toLowerCase().includes(search.toLowerCase())) return false;
  if (labels.length && !carries(channel, labels)) return false;
  if (filter === "failing") return failing(channel);
  return !filter || statusOf(channel) === filter;
}

function shownChannels() {
  return state.channels.filter(wanted).sort(SORTS[state.view.sort] || SORTS.name);
}

function render() {
  // Where each strip was scrolled to, from its newest end (scrollLeft 0, negative further
  // back: the strip is row-reverse), so a redraw keeps the reader's place.
  const scrolled = new Map([...document.querySelectorAll(".timeline")].map((t) => [t.dataset.id, t.querySelector(".past").scrollLeft]));
  const shown = shownChannels();
  $("#channels tbody").replaceChildren(...shown.map(channelRow));
  for (const t of document.querySelectorAll(".timeline")) {
    const past = t.querySelector(".past");
    past.scrollLeft = scrolled.get(t.dataset.id) || 0;
    markClipped(past);
  }
  $("#empty").hidden = state.channels.length > 0;
  $("#shown").textContent = shown.length === state.channels.length
    ? `${state.channels.length} channel${state.channels.length === 1 ? "" : "s"}`
    : `${shown.length} of ${state.channels.length} channels`;
}

function legend() {
  const names = { completed: "completed", failed: "failed", skipped_misfire: "misfire summary", skipped_singleton: "skipped (overlap)", running: "running", pending: "pending", cancelled: "cancelled" };
  $("#legend").replaceChildren(...Object.entries(names).map(([status, label]) =>
    el("span", {}, el("span", { class: `cell ${status}` }), label)),
  el("span", {}, el("span", { class: "cell skipped_misfire clipped" }), "summary kept in view"),
  el("span", {}, el("span", { class: "day fire" }), "fires that day"),
  el("span", {}, el("span", { class: "day dst" }), "DST change"));
}

function dl(pairs) {
  return el("dl", {}, pairs.flatMap(([label, value]) => [el("dt", {}, label), el("dd", {}, value ?? "–")]));
}

function showPanel(...content) {
  const panel = $("#panel"), top = panel.scrollTop, opening = panel.hidden;
  $("#panel-body").replaceChildren(...content.flat());
  panel.hidden = false;
  panel.scrollTop = top; // a refresh redraws it in place
  // Where the panel is a sheet over the page, keep the chosen row above it.
  if (opening) { const row = $("#channels tr.selected") || $(".cell.selected"); if (row) row.scrollIntoView({ block: "nearest" }); }
}

// The panel open, redrawn from the ledger (after an action, and on every refresh).
function refreshPanel() {
  if (!state.panel || $("#panel").hidden) return Promise.resolve();
  const { kind, id } = state.panel;
  return kind === "occurrence" ? showOccurrence(id, true) : showChannel(id, true);
}

// Still the panel asked for? A slow answer must not draw over a newer choice.
function current(kind, id) {
  return state.panel && state.panel.kind === kind && state.panel.id === id;
}

// The panel open is in the address (#channel=… or #occurrence=…), as event links write it,
// so a link from an alert opens the same panel and a reload keeps it.
function remember(kind, id) {
  history.replaceState(null, "", id ? `#${kind}=${enc(id)}` : `${location.pathname}${location.search}`);
}

function openFromAddress() {
  const wanted = new URLSearchParams(location.hash.slice(1));
  if (wanted.get("occurrence")) showOccurrence(wanted.get("occurrence"));
  else if (wanted.get("channel")) showChannel(wanted.get("channel"));
}

function eventRow(e) {
  const open = e.occurrence_id ? () => showOccurrence(e.occurrence_id) : null;
  const delivery = !e.deliver ? "recorded" : e.delivered_at ? "delivered" : "undelivered";
  return el("tr", { class: `event${open ? " link" : ""}`, dataset: { kind: e.kind, id: e.event_id }, onclick: open, title: e.error || "" },
    el("td", { class: "mono at" }, time(e.at)),
    el("td", {},
      el("div", {}, el("span", { class: `kind ${e.kind.replace(".", "-")}` }, e.kind), " ",
        el("span", { class: "muted", title: e.last_error || "" }, delivery)),
      e.error ? el("div", { class: "event-error" }, e.error) : null));
}

async function showOccurrence(id, again = false) {
  if (!again) {
    state.selected = id;
    state.panel = { kind: "occurrence", id };
    render();
    remember("occurrence", id);
  }
  let record;
  try { record = (await api("GET", `cron/occurrences/${enc(id)}`)).data; } catch (error) { return again ? null : toast(error.message, true); }
  if (!current("occurrence", id)) return null;
  const known = ["id", "channel_name", "channel_id", "trigger", "scheduled_for", "due_at", "status", "attempt", "channel_version", "executing_version", "target_ref", "claimed_by", "claimed_until", "singleton_key", "singleton_slot", "fencing_token", "trace_id", "started_at", "completed_at", "lag_ms", "duration_ms", "error_message", "result", "created_at", "updated_at", "attempts", "late_by_ms"];
  const pairs = [
    ["id", el("span", { class: "mono" }, record.id)],
    ["channel", record.channel_name],
    ["status", badge(record.status)],
    ["trigger", record.trigger],
    ["scheduled for", time(record.scheduled_for)],
    ["due at", time(record.due_at)],
    ["attempt", record.attempt],
    ["version", `materialised at v${record.channel_version}, ran v${record.executing_version ?? "–"}`],
    ["target", record.target_ref],
    ["started", time(record.started_at)],
    ["completed", time(record.completed_at)],
    ["lag", record.lag_ms == null ? "–" : span(record.lag_ms)],
    ["late by", record.late_by_ms == null ? "–" : span(record.late_by_ms)],
    ["duration", record.duration_ms == null ? "–" : span(record.duration_ms)],
    ["claimed by", record.claimed_by],
    ["claimed until", time(record.claimed_until)],
    ["singleton", record.singleton_key ? `${record.singleton_key} slot ${record.singleton_slot} token ${record.fencing_token}` : "–"],
    ["trace id", record.trace_id],
    ...Object.entries(record).filter(([key]) => !known.includes(key)).map(([key, value]) => [key.replaceAll("_", " "), typeof value === "object" && value !== null ? JSON.stringify(value) : value]),
  ];
  const retryable = ["failed", "cancelled", "skipped_misfire", "skipped_singleton"].includes(record.status);
  const cancellable = ["pending", "claimed", "running"].includes(record.status);
  return showPanel(
    el("h2", {}, `Occurrence of ${record.channel_name}`),
    el("div", {},
      el("button", { class: "act primary", id: "retry", disabled: !retryable, onclick: () => act(`cron/occurrences/${enc(id)}/retry`, "POST", undefined, "retried: pending again", () => showOccurrence(id)) }, "Retry"),
      el("button", { class: "act danger", id: "cancel", disabled: !cancellable, onclick: () => act(`cron/occurrences/${enc(id)}/cancel`, "POST", undefined, "cancelled", () => showOccurrence(id)) }, "Cancel")),
    el("h3", {}, "record"),
    dl(pairs),
    record.error_message ? [el("h3", {}, "error"), el("pre", { class: "error-text" }, record.error_message)] : [],
    (record.attempts || []).length ? [el("h3", {}, "attempts"), attemptList(record.attempts)] : [],
    record.result ? [el("h3", {}, "result"), el("pre", {}, record.result)] : [],
  );
}

// Every attempt of an occurrence, oldest first: how it ended, when, how long, and why.
function attemptList(attempts) {
  return el("ol", { class: "attempts", id: "attempts" }, ...attempts.map((a) =>
    el("li", { class: "attempt" },
      el("div", {}, `attempt ${a.number} `, badge(a.outcome || "running"),
        ` ${time(a.started_at)}`, a.duration_ms == null ? "" : ` · ${span(a.duration_ms)}`),
      a.error_message ? el("pre", { class: "error-text" }, a.error_message) : [],
      a.error_detail ? el("pre", { class: "detail" }, a.error_detail) : [])));
}

async function showChannel(id, again = false) {
  if (!again) {
    state.selected = id;
    state.panel = { kind: "channel", id };
    render();
    remember("channel", id);
  }
  let channel, preview, events;
  try {
    [channel, preview, events] = await Promise.all([
      api("GET", `channels/${enc(id)}`).then((a) => a.data),
      api("GET", `channels/${enc(id)}/preview?count=10`).then((a) => a.data).catch(() => null),
      api("GET", `cron/events?channel_id=${enc(id)}&limit=${EVENTS}`).then((a) => a.data).catch(() => null),
    ]);
  } catch (error) { return again ? null : toast(error.message, true); }
  if (!current("channel", id)) return null;
  const alert = state.alerts.get(id);
  const compiled = channel.compiled || {};
  const dst = comingDays(compiled.timezone || "UTC").filter((d) => d.change);
  // With jitter a row falls due after its instant: then the preview shows when.
  const jittered = preview && preview.instants.some((i) => new Date(i.due_at).getTime() !== new Date(i.utc).getTime());
  return showPanel(
    el("h2", {}, channel.name, " ", badge(statusOf(channel))),
    dl([
      ["id", el("span", { class: "mono" }, channel.channel_id)],
      ["version", channel.version],
      ["labels", labelChips(channel) || el("span", { class: "muted" }, "none")],
      ["schedule", el("span", { class: "mono" }, scheduleOf(compiled) || "(the stored schedule does not compile)")],
      ["timezone", compiled.timezone],
      ["misfire policy", compiled.misfire_policy],
      ["concurrency", compiled.concurrency_policy],
      ["next fire", compiled.next_fire_at ? `${time(compiled.next_fire_at)} (${relative(compiled.next_fire_at)})` : "–"],
      ["target", channel.target_ref],
      ["timeout", `${channel.timeout_ms} ms`],
      ["DST this month", dst.length ? dst.map((d) => `${d.date.toISOString().slice(0, 10)} (${d.change > 0 ? "+" : "−"}${Math.abs(d.change)} min)`).join(", ") : "none"],
    ]),
    alert ? el("p", { class: "alert-text" }, `open alert: ${alert}, until a run completes`) : null,
    el("h3", {}, "recent events"),
    events && events.length
      ? el("table", { class: "events" }, events.map(eventRow))
      : el("p", { class: "muted" }, events ? "no events yet" : "events unavailable"),
    el("h3", {}, "next fires"),
    preview && preview.instants.length ? el("table", { class: "preview" },
      el("tr", {}, el("th", {}, "UTC"), el("th", {}, `local (${preview.timezone})`), jittered ? el("th", {}, "due (UTC)") : null),
      preview.instants.map((i) => el("tr", {}, el("td", { class: "mono" }, i.utc), el("td", { class: "mono" }, i.local),
        jittered ? el("td", { class: "mono" }, i.due_at) : null)))
      : el("p", { class: "muted" }, (preview && preview.note) || "no preview"),
    el("h3", {}, "definition"),
    el("pre", {}, JSON.stringify({ labels: channel.labels, transport_config: channel.transport_config, target: channel.target }, null, 2)),
  );
}

// --- actions and refresh ---------------------------------------------------------------------

function enc(value) { return encodeURIComponent(value); }

let toastTimer = null;
function toast(message, bad = false) {
  const node = $("#toast");
  node.textContent = message;
  node.className = `toast${bad ? " bad" : ""}`;
  node.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { node.hidden = true; }, 4000);
}

async function act(path, method, body, done, then) {
  try {
    await api(method, path, body);
    toast(done);
  } catch (error) {
    toast(error.message, true);
  }
  await refresh();
  if (then) await then();
}

// Page a strip back: the next refreshes read that many more of its rows.
async function loadOlder(channelId) {
  state.depth.set(channelId, Math.min((state.depth.get(channelId) || STRIP) + STRIP, 1000));
  await refresh();
}

async function refreshHealth() {
  try {
    const h = (await api("GET", "/health")).data;
    const beat = (label, at) => `${label} ${at ? relative(at) : "never"}`;
    $("#health").replaceChildren(
      `database ${h.database} · ${h.pending} pending`,
      h.oldest_pending_secs ? ` (oldest ${span(h.oldest_pending_secs * 1000)})` : "",
      ` · ${beat("reconciled", h.last_reconcile_at)} · ${beat("claimed", h.last_claim_at)}`,
      h.undelivered_events ? el("span", { class: "warn" }, ` · ${h.undelivered_events} event${h.undelivered_events === 1 ? "" : "s"} undelivered (oldest ${span(h.oldest_undelivered_event_secs * 1000)})`) : "");
  } catch (error) {
    $("#health").replaceChildren(el("span", { class: "bad" }, `API unavailable: ${error.message}`));
  }
}

// One refresh at a time; one asked for meanwhile (an action's) runs after it, never skipped,
// so what an action changed is on the page once its promise settles.
async function refresh() {
  while (state.busy) await state.busy.catch(() => null);
  state.busy = readLedger();
  try { await state.busy; } finally { state.busy = null; }
  refreshHealth();
  await refreshPanel();
}

// Every row of a list: a page at a time, each after the key (`next`) the one before named.
async function everyRow(path) {
  const rows = [];
  let after = null;
  do {
    const page = await api("GET", `${path}?limit=1000${after ? `&after=${enc(after)}` : ""}`);
    rows.push(...page.data);
    after = page.next;
  } while (after);
  return rows;
}

async function readLedger() {
  try {
    const [channels, status, misfires] = await Promise.all([
      everyRow("channels"),
      everyRow("cron/status").catch(() => []),
      api("GET", `cron/occurrences?status=skipped_misfire&limit=${MISFIRES}`).then((a) => a.data).catch(() => []),
    ]);
    const strips = await Promise.all(channels.map((c) =>
      api("GET", `cron/occurrences?channel_id=${enc(c.channel_id)}&limit=${state.depth.get(c.channel_id) || STRIP}`).catch(() => ({ data: [], total: 0 }))));
    state.channels = channels;
    state.status = new Map(status.map((r) => [r.channel_id, r]));
    state.alerts = new Map(status.filter((r) => r.open_alert).map((r) => [r.channel_id, r.open_alert]));
    state.strips = new Map(channels.map((c, i) => [c.channel_id, strips[i].data]));
    state.totals = new Map(channels.map((c, i) => [c.channel_id, strips[i].total]));
    state.misfires = new Map();
    for (const o of misfires) {
      if (!state.misfires.has(o.channel_id)) state.misfires.set(o.channel_id, []);
      state.misfires.get(o.channel_id).push(o);
    }
    render();
    document.body.dataset.loaded = String(Date.now());
  } catch (error) {
    toast(error.message, true);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  legend();
  $("#close").addEventListener("click", () => { $("#panel").hidden = true; state.selected = null; state.panel = null; remember(); render(); });
  $("#search").addEventListener("input", (event) => { state.view.search = event.target.value.trim(); render(); });
  $("#labels").addEventListener("input", (event) => { state.view.labels = selectorOf(event.target.value); render(); });
  $("#filter").addEventListener("change", (event) => { state.view.filter = event.target.value; render(); });
  $("#sort").addEventListener("change", (event) => { state.view.sort = event.target.value; render(); });
  window.addEventListener("hashchange", openFromAddress);
  $("#utc").addEventListener("change", (event) => { state.utc = event.target.checked; render(); });
  refresh().then(openFromAddress);
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
});
