// The cronledger console: one page over the same JSON API the command line uses.
// Every request is same-origin, and every one that changes something sends
// Content-Type: application/json. Nothing is loaded from anywhere else.
"use strict";

const API = "/api/v1/admin";
const STRIP = 60; // occurrences per channel timeline
const REFRESH_MS = 3000;
const STATUSES = ["completed", "failed", "skipped_misfire", "skipped_singleton", "running", "claimed", "pending", "cancelled"];
const EVENTS = 20; // recent events in a channel's panel
// A delivered alert stays open until a completed occurrence answers it: the row says so.
const ALERTS = { "occurrence.failed": "failed", "occurrence.abandoned": "abandoned", "occurrence.overdue": "overdue", "channel.stalled": "stalled" };
const state = { channels: [], strips: new Map(), alerts: new Map(), selected: null, utc: true, busy: false };

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

function badge(status) {
  return el("span", { class: `badge ${status || ""}` }, status || "–");
}

function misfireCount(o) {
  const match = /skipped (\d+) missed/.exec(o.error_message || "");
  return match ? Number(match[1]) : null;
}

function cell(o) {
  const missed = o.status === "skipped_misfire" ? misfireCount(o) : null;
  const title = [`${o.status} · ${o.trigger} · ${time(o.scheduled_for)}`, o.error_message].filter(Boolean).join("\n");
  return el("button", {
    class: `cell ${STATUSES.includes(o.status) ? o.status : "unknown"}${state.selected === o.id ? " selected" : ""}`,
    title,
    dataset: { id: o.id, status: o.status },
    onclick: (event) => { event.stopPropagation(); showOccurrence(o.id); },
  }, missed === null ? "" : `${missed} missed`);
}

function timeline(channel, strip) {
  const zone = (channel.compiled && channel.compiled.timezone) || "UTC";
  const rows = strip.slice().reverse(); // oldest first
  const past = rows.filter((o) => new Date(o.scheduled_for).getTime() <= Date.now() || o.status !== "pending");
  const ahead = rows.filter((o) => !past.includes(o));
  const days = comingDays(zone).map((d) => el("span", {
    class: `day${d.change ? " dst" : ""}`,
    title: `${d.date.toISOString().slice(0, 10)}${d.change ? ` · ${zone}: clocks go ${d.change > 0 ? "forward" : "back"} ${Math.abs(d.change)} min` : ""}`,
    dataset: d.change ? { dst: d.date.toISOString().slice(0, 10) } : {},
  }));
  return el("div", { class: "timeline", dataset: { channel: channel.name } },
    el("span", { class: "past" }, past.map(cell)), el("span", { class: "now", title: "now" }),
    el("span", { class: "ahead" }, ahead.map(cell), el("span", { class: "days", title: `the next 31 days in ${zone}` }, days)));
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

function channelRow(channel) {
  const strip = state.strips.get(channel.channel_id) || [];
  const compiled = channel.compiled || {};
  const last = lastRun(strip);
  const canRun = channel.status === "active";
  const toggle = channel.status === "active"
    ? el("button", { class: "act", onclick: () => act(`channels/${enc(channel.channel_id)}/status`, "PATCH", { status: "paused" }, `paused ${channel.name}`) }, "Pause")
    : el("button", { class: "act", disabled: !["paused", "draft"].includes(channel.status), onclick: () => act(`channels/${enc(channel.channel_id)}/status`, "PATCH", { status: "active" }, `resumed ${channel.name}`) }, "Resume");
  return el("tr", { class: `channel${state.selected === channel.channel_id ? " selected" : ""}`, dataset: { channel: channel.name } },
    el("td", {}, el("div", { class: "name", onclick: () => showChannel(channel.channel_id) }, channel.name), badge(channel.status), " ", alertBadge(channel)),
    el("td", {}, el("div", { class: "mono" }, scheduleOf(compiled) || "(invalid)"), el("div", { class: "muted" }, compiled.timezone || "")),
    el("td", { class: "next", title: time(compiled.next_fire_at) }, compiled.next_fire_at ? relative(compiled.next_fire_at) : el("span", { class: "muted" }, "–")),
    el("td", { class: "last" }, last ? badge(last.status) : el("span", { class: "muted" }, "–")),
    el("td", { class: "strip" }, timeline(channel, strip)),
    el("td", { class: "actions" },
      el("button", { class: "act primary", disabled: !canRun, onclick: () => act(`channels/${enc(channel.channel_id)}/trigger`, "POST", undefined, `triggered ${channel.name}`) }, "Trigger"),
      toggle));
}

function render() {
  const body = $("#channels tbody");
  body.replaceChildren(...state.channels.map(channelRow));
  $("#empty").hidden = state.channels.length > 0;
}

function legend() {
  const names = { completed: "completed", failed: "failed", skipped_misfire: "skipped (misfire summary)", skipped_singleton: "skipped (overlap)", running: "running", pending: "pending", cancelled: "cancelled" };
  $("#legend").replaceChildren(...Object.entries(names).map(([status, label]) =>
    el("span", {}, el("span", { class: `cell ${status}` }), label)),
  el("span", {}, el("span", { class: "day dst" }), "DST change"));
}

function dl(pairs) {
  return el("dl", {}, pairs.flatMap(([label, value]) => [el("dt", {}, label), el("dd", {}, value ?? "–")]));
}

function showPanel(...content) {
  $("#panel-body").replaceChildren(...content.flat());
  $("#panel").hidden = false;
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

async function showOccurrence(id) {
  state.selected = id;
  render();
  remember("occurrence", id);
  let record;
  try { record = (await api("GET", `cron/occurrences/${enc(id)}`)).data; } catch (error) { return toast(error.message, true); }
  const known = ["id", "channel_name", "channel_id", "trigger", "scheduled_for", "due_at", "status", "attempt", "channel_version", "executing_version", "target_ref", "claimed_by", "claimed_until", "singleton_key", "singleton_slot", "fencing_token", "trace_id", "started_at", "completed_at", "lag_ms", "duration_ms", "error_message", "result", "created_at", "updated_at"];
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
    ["duration", record.duration_ms == null ? "–" : span(record.duration_ms)],
    ["claimed by", record.claimed_by],
    ["claimed until", time(record.claimed_until)],
    ["singleton", record.singleton_key ? `${record.singleton_key} slot ${record.singleton_slot} token ${record.fencing_token}` : "–"],
    ["trace id", record.trace_id],
    ...Object.entries(record).filter(([key]) => !known.includes(key)).map(([key, value]) => [key.replaceAll("_", " "), typeof value === "object" && value !== null ? JSON.stringify(value) : value]),
  ];
  const retryable = ["failed", "cancelled", "skipped_misfire", "skipped_singleton"].includes(record.status);
  const cancellable = ["pending", "claimed", "running"].includes(record.status);
  showPanel(
    el("h2", {}, `Occurrence of ${record.channel_name}`),
    el("div", {},
      el("button", { class: "act primary", id: "retry", disabled: !retryable, onclick: () => act(`cron/occurrences/${enc(id)}/retry`, "POST", undefined, "retried: pending again", () => showOccurrence(id)) }, "Retry"),
      el("button", { class: "act danger", id: "cancel", disabled: !cancellable, onclick: () => act(`cron/occurrences/${enc(id)}/cancel`, "POST", undefined, "cancelled", () => showOccurrence(id)) }, "Cancel")),
    el("h3", {}, "record"),
    dl(pairs),
    record.error_message ? [el("h3", {}, "error"), el("pre", { class: "error-text" }, record.error_message)] : [],
    record.result ? [el("h3", {}, "result"), el("pre", {}, record.result)] : [],
  );
}

async function showChannel(id) {
  state.selected = id;
  render();
  remember("channel", id);
  let channel, preview, events;
  try {
    [channel, preview, events] = await Promise.all([
      api("GET", `channels/${enc(id)}`).then((a) => a.data),
      api("GET", `channels/${enc(id)}/preview?count=10`).then((a) => a.data).catch(() => null),
      api("GET", `cron/events?channel_id=${enc(id)}&limit=${EVENTS}`).then((a) => a.data).catch(() => null),
    ]);
  } catch (error) { return toast(error.message, true); }
  const alert = state.alerts.get(id);
  const compiled = channel.compiled || {};
  const dst = comingDays(compiled.timezone || "UTC").filter((d) => d.change);
  // With jitter a row falls due after its instant: then the preview shows when.
  const jittered = preview && preview.instants.some((i) => new Date(i.due_at).getTime() !== new Date(i.utc).getTime());
  showPanel(
    el("h2", {}, channel.name, " ", badge(channel.status)),
    dl([
      ["id", el("span", { class: "mono" }, channel.channel_id)],
      ["version", channel.version],
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
    el("pre", {}, JSON.stringify({ transport_config: channel.transport_config, target: channel.target }, null, 2)),
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

async function refresh() {
  if (state.busy) return;
  state.busy = true;
  try {
    const [page, status] = await Promise.all([
      api("GET", "channels?limit=1000"),
      api("GET", "cron/status?limit=1000").then((a) => a.data).catch(() => []),
    ]);
    const strips = await Promise.all(page.data.map((c) =>
      api("GET", `cron/occurrences?channel_id=${enc(c.channel_id)}&limit=${STRIP}`).then((a) => a.data).catch(() => [])));
    state.channels = page.data;
    state.alerts = new Map(status.filter((r) => r.open_alert).map((r) => [r.channel_id, r.open_alert]));
    state.strips = new Map(page.data.map((c, i) => [c.channel_id, strips[i]]));
    render();
    document.body.dataset.loaded = String(Date.now());
  } catch (error) {
    toast(error.message, true);
  } finally {
    state.busy = false;
  }
  refreshHealth();
}

document.addEventListener("DOMContentLoaded", () => {
  legend();
  $("#close").addEventListener("click", () => { $("#panel").hidden = true; state.selected = null; remember(); render(); });
  window.addEventListener("hashchange", openFromAddress);
  $("#utc").addEventListener("change", (event) => { state.utc = event.target.checked; render(); });
  refresh().then(openFromAddress);
  setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);
});
