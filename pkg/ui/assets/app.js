// The operator's page: reads the admin port's JSON every REFRESH_MS and
// draws it. Whatever a caller sent (descriptor values, keys, errors) goes
// into the page as text only: textContent and createElement, never markup.
"use strict";

const REFRESH_MS = 1500;
const SVG = "http://www.w3.org/2000/svg";

// el makes an element with attributes and children (strings become text).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
  }
  return e;
}

// table makes a table with a caption, head cells and rows of cells; a
// caption that only repeats the heading above is a label, not shown.
function table(caption, head, rows, hideCaption) {
  const t = hideCaption ? el("table", { "aria-label": caption }) : el("table", {}, el("caption", { text: caption }));
  t.append(el("thead", {}, el("tr", {}, ...head.map((h) => el("th", { scope: "col", text: h })))));
  const body = el("tbody");
  for (const r of rows) body.append(el("tr", {}, ...r.map((c) => (c instanceof Node ? el("td", {}, c) : el("td", { text: String(c) })))));
  t.append(body);
  return t;
}

// replace swaps a container's children, keeping the keyboard focus on the
// control of the same data-focus key if it is redrawn.
function replace(container, ...children) {
  const focused = document.activeElement;
  const key = focused && container.contains(focused) ? focused.dataset.focus : undefined;
  container.replaceChildren(...children);
  if (key !== undefined) {
    for (const c of container.querySelectorAll("[data-focus]")) {
      if (c.dataset.focus === key) {
        c.focus();
        break;
      }
    }
  }
}

// getJSON reads one of the page's endpoints (a relative URL: the page's
// own origin), failing on a status other than 200.
async function getJSON(path) {
  const r = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + errorText(await r.text()));
  return r.json();
}

// duration writes seconds as 1d 2h, 3h 4m, 5m 6s or 7s.
function duration(seconds) {
  seconds = Math.max(0, Math.round(seconds));
  const d = Math.floor(seconds / 86400), h = Math.floor((seconds % 86400) / 3600);
  const m = Math.floor((seconds % 3600) / 60), s = seconds % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + s + "s";
  return s + "s";
}

// ago writes an RFC 3339 instant as how long ago it was, and itself.
function ago(rfc3339) {
  if (!rfc3339) return "never";
  const t = Date.parse(rfc3339);
  if (Number.isNaN(t)) return rfc3339;
  return duration((Date.now() - t) / 1000) + " ago (" + rfc3339 + ")";
}

// fmt writes a number with two decimals at most.
function fmt(n) {
  return typeof n === "number" ? (Number.isInteger(n) ? String(n) : n.toFixed(2)) : String(n ?? "");
}

// descriptorText writes descriptor entries as k=v, k=v.
function descriptorText(pairs) {
  return (pairs || []).map((p) => p.key + "=" + p.value).join(", ");
}

// errorText is the error of a JSON error body ({"error": ...}), or the
// body's start.
function errorText(body) {
  try {
    const e = JSON.parse(body).error;
    if (typeof e === "string") return e;
  } catch (_) {
    // not JSON: the body itself
  }
  return body.slice(0, 300);
}

// ---- Service ----

function drawService(s) {
  const facts = [
    ["Version", s.version],
    ["Mode", s.mode === "local-first" ? "local-first, synced every " + s.sync_interval : s.mode],
    ["Store", s.store.name + (s.store.ok ? ": answers" : ": DOWN" + (s.store.error ? " (" + s.store.error + ")" : ""))],
    ["Config", s.config.source + " (" + s.config.domains + " domains)"],
    ["Last reload", s.config.last_reload ? ago(s.config.last_reload) : "none since start"],
    ["Reload error", s.config.last_error || "none"],
    ["Uptime", duration(s.uptime_seconds) + " (since " + s.started + ")"],
  ];
  const dl = document.getElementById("service-facts");
  dl.replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v ?? "") })]));
  dl.querySelectorAll("dd")[2].className = s.store.ok ? "ok" : "bad";
  dl.querySelectorAll("dd")[5].className = s.config.last_error ? "bad" : "";
  drawRegions(s.regions);
}

// ---- Regions ----

function drawRegions(regions) {
  const section = document.getElementById("regions");
  section.hidden = !regions || regions.length === 0;
  if (section.hidden) return;
  const rows = regions.map((r) => [
    r.region + (r.own ? " (this region)" : ""),
    el("span", { class: r.state === "fresh" ? "ok" : "bad", text: r.state }),
    r.last_exchange_seconds < 0 ? "never" : r.last_exchange_seconds < 60 ? r.last_exchange_seconds.toFixed(1) + " s ago" : duration(r.last_exchange_seconds) + " ago",
    r.failed_exchanges, r.replicas, r.buckets, fmt(r.demand_per_second)]);
  replace(document.getElementById("regions-body"),
    table("Regions", ["Region", "State", "Last exchange with its store", "Failed exchanges", "Replicas", "Buckets", "Demand (/s)"], rows));
}

// regionProblems are the regions whose reports did not arrive.
function regionProblems(regions) {
  return (regions || []).filter((r) => r.state !== "fresh").map((r) => r.state === "late"
    ? "Region " + r.region + " is late: its reports have not arrived; it keeps its part of each limit."
    : "Region " + r.region + " is gone: silent past -region-silence; its part of each limit is given back to the others.");
}

// regionText is a bucket's part of its limit in each region.
function regionText(v) {
  if (!v.divided) return "region " + v.region + " decides under an equal part (" + fmt(v.size) + ", " + fmt(v.rate) + "/s) until the regions exchange";
  return "region " + v.region + " decides under " + fmt(v.size) + " at " + fmt(v.rate) + "/s; " +
    v.parts.map((p) => p.region + " (" + p.state + "): asked " + fmt(p.demand_per_second) + "/s, holds " + fmt(p.size) + " at " + fmt(p.rate) + "/s").join(", ");
}

// ---- Limits ----

// chartSpan is how many seconds the charts show: every second since the
// first with a decision, in whole minutes, at least one, at most all.
function chartSpan(domains) {
  let most = 0, used = 60;
  for (const d of domains) {
    for (const x of d.limits || []) {
      for (const values of [x.allowed || [], x.refused || []]) {
        most = Math.max(most, values.length);
        const first = values.findIndex((v) => v > 0);
        if (first >= 0) used = Math.max(used, values.length - first);
      }
    }
  }
  return Math.max(1, Math.min(Math.ceil(used / 60) * 60, Math.max(most, 60)));
}

// chart draws allowed and refused per second, the last n seconds, as two
// lines in an SVG.
function chart(allowed, refused, n, label) {
  const w = 240, h = 36;
  const top = Math.max(1, ...allowed, ...refused);
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("role", "img");
  const sum = (a) => a.reduce((x, y) => x + y, 0);
  const title = label + ": " + sum(allowed) + " allowed, " + sum(refused) + " refused over " + n + " s; peak " + top + "/s";
  svg.setAttribute("aria-label", title);
  const t = document.createElementNS(SVG, "title");
  t.textContent = title;
  svg.append(t);
  for (const [values, cls] of [[allowed, "line-allowed"], [refused, "line-refused"]]) {
    const line = document.createElementNS(SVG, "polyline");
    const off = n - values.length;
    line.setAttribute("points", values.map((v, i) => (((off + i) * w) / (n - 1)).toFixed(1) + "," + (h - 1 - (v * (h - 2)) / top).toFixed(1)).join(" "));
    line.setAttribute("class", cls);
    svg.append(line);
  }
  return svg;
}

function lastMinute(values) {
  return values.slice(-60).reduce((x, y) => x + y, 0);
}

function drawLimits(l) {
  const domains = l.domains || [];
  const names = document.getElementById("domain-names");
  names.replaceChildren(...domains.map((d) => el("option", { value: d.name })));
  if (!domains.length) {
    replace(document.getElementById("limits-body"), el("p", { text: "No domain in the config." }));
    return;
  }
  const span = chartSpan(domains);
  const parts = domains.map((d) => {
    const limits = d.limits || [];
    const paths = new Set(limits.map((x) => x.path));
    const rows = limits.map((x) => {
      const allowed = x.allowed || [], refused = x.refused || [];
      // A node's depth is how many nodes with limits lie above it (a value
      // may hold '/', so the path's slashes cannot be counted).
      const depth = [...paths].filter((p) => x.path.startsWith(p + "/")).length;
      const path = el("span", { class: "path", text: x.path });
      path.style.paddingLeft = depth * 1.25 + "em";
      return [path, x.name || "", x.algorithm, x.rate, lastMinute(allowed), lastMinute(refused), chart(allowed.slice(-span), refused.slice(-span), span, x.label)];
    });
    return el("section", { class: "domain", "data-domain": d.name },
      el("h3", { text: "Domain " + d.name }),
      table("Limits of domain " + d.name, ["Descriptor", "Name", "Algorithm", "Rate", "Allowed (1 min)", "Refused (1 min)", "Per second, last " + (span % 60 ? span + " s" : span / 60 + " min")], rows, true));
  });
  replace(document.getElementById("limits-body"), ...parts);
}

// ---- Refused most ----

async function resetBucket(b) {
  const d = descriptorText(b.descriptor);
  if (!window.confirm("Reset the bucket " + b.domain + " [" + d + "] (" + b.limit + ")? Its count starts again from zero.")) return;
  const q = new URLSearchParams({ domain: b.domain, descriptor: b.descriptor.map((p) => p.key + "=" + p.value).join(",") });
  const out = document.getElementById("refused-result");
  try {
    const r = await fetch("buckets?" + q.toString(), { method: "DELETE" });
    out.textContent = r.ok ? "Reset " + b.domain + " [" + d + "]." : "Reset failed: " + r.status + " " + errorText(await r.text());
  } catch (e) {
    out.textContent = "Reset failed: " + e.message;
  }
  refresh();
}

function drawRefused(r) {
  const buckets = r.buckets || [];
  const body = document.getElementById("refused-body");
  const result = document.getElementById("refused-result") || el("p", { id: "refused-result", "aria-live": "polite" });
  if (!buckets.length) {
    replace(body, el("p", { text: "No bucket refused in the last " + r.window_seconds + " s." }), result);
    return;
  }
  const rows = buckets.map((b) => {
    b.descriptor = b.descriptor || [];
    const resettable = b.descriptor.length > 0 && b.descriptor.every((p) => !p.key.includes(",") && !p.value.includes(",") && !p.key.includes("="));
    const button = el("button", { type: "button", class: "reset", "data-focus": b.domain + "\u0000" + b.key, text: "Reset" });
    button.setAttribute("aria-label", "Reset " + b.domain + " " + descriptorText(b.descriptor));
    if (resettable) button.addEventListener("click", () => resetBucket(b));
    else {
      button.disabled = true;
      button.title = "a key or value holds ',' and cannot be named in DELETE /buckets";
    }
    return [b.domain, el("span", { class: "descriptor", text: descriptorText(b.descriptor) }), b.limit, b.error ? b.refused + " (up to " + b.error + " may be another bucket's)" : b.refused, b.remaining, duration(b.reset_seconds), button];
  });
  replace(body, table("Refused in the last " + r.window_seconds + " s", ["Domain", "Descriptor", "Limit", "Refused", "Remaining", "Resets in", ""], rows), result);
}

// ---- RLQS ----

function drawRLQS(q) {
  const streams = q.streams || [], levels = q.levels || [];
  const parts = [];
  parts.push(streams.length
    ? table("Streams", ["Peer", "Domain", "Buckets", "Last report"], streams.map((s) => [s.peer, s.domain, s.buckets, ago(s.last_report)]))
    : el("p", { text: "No RLQS stream." }));
  if (levels.length) {
    const rows = levels.map((l) => [el("span", { class: "descriptor", text: l.level }), l.subscribers, fmt(l.demand), l.fill_limits === false ? "none: every demand fits" : fmt(l.fill),
      (l.top || []).map((t) => t.instance + ": " + fmt(t.share)).join(", ")]);
    parts.push(table("Levels", ["Level", "Subscribers", "Demand (/s)", "Fill level", "Largest shares"], rows));
  }
  replace(document.getElementById("rlqs-body"), ...parts);
}

// ---- Why: the explain form ----

function addEntry(key, value) {
  const list = document.getElementById("explain-entries");
  const n = list.children.length + 1;
  const k = el("input", { name: "key", autocomplete: "off", "aria-label": "Key " + n });
  const v = el("input", { name: "value", autocomplete: "off", "aria-label": "Value " + n });
  k.value = key || "";
  v.value = value || "";
  const remove = el("button", { type: "button", text: "Remove", "aria-label": "Remove entry " + n });
  const item = el("li", {}, k, " = ", v, " ", remove);
  remove.addEventListener("click", () => {
    item.remove();
    document.getElementById("explain-add").focus();
  });
  list.append(item);
  return k;
}

function explainSummary(e) {
  const out = [el("p", { class: e.code === "OVER_LIMIT" ? "bad" : "ok", text: "Answer: " + (e.code || "?") + " (domain " + e.domain + ")" })];
  for (const d of e.descriptors || []) {
    const parts = [descriptorText(d.entries) + ": " + (d.code || "no limit")];
    if (d.unlimited) parts.push("unlimited");
    if (d.deciding) parts.push("decided by " + d.deciding.path + (d.deciding.name ? " (" + d.deciding.name + ")" : ""));
    if (d.remaining !== undefined) parts.push(d.remaining + " remaining");
    if (d.duration_until_reset) parts.push("resets in " + d.duration_until_reset);
    if (d.stopped) parts.push("stopped at entry " + d.stopped.entry + ": " + d.stopped.reason);
    out.push(el("p", { class: "explained", text: parts.join("; ") }));
    for (const step of d.walk || []) {
      for (const l of step.limits || []) {
        const v = l.bucket && l.bucket.state && l.bucket.state.regions;
        if (v) out.push(el("p", { class: "explained regions", text: l.label + ": " + regionText(v) }));
      }
    }
  }
  out.push(el("details", {}, el("summary", { text: "The whole explanation (JSON)" }), el("pre", { text: JSON.stringify(e, null, 2) })));
  return out;
}

async function explain(ev) {
  ev.preventDefault();
  const out = document.getElementById("explain-result");
  const entries = [...document.querySelectorAll("#explain-entries li")]
    .map((li) => ({ key: li.querySelector("[name=key]").value, value: li.querySelector("[name=value]").value }))
    .filter((e) => e.key !== "");
  const body = { domain: document.getElementById("explain-domain").value, descriptors: [{ entries }] };
  out.replaceChildren(el("p", { text: "Asking…" }));
  try {
    const r = await fetch("explain", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const text = await r.text();
    if (!r.ok) {
      out.replaceChildren(el("p", { class: "bad", text: "Explain failed: " + r.status + " " + errorText(text) }));
      return;
    }
    out.replaceChildren(...explainSummary(JSON.parse(text)));
  } catch (e) {
    out.replaceChildren(el("p", { class: "bad", text: "Explain failed: " + e.message }));
  }
}

// ---- refresh ----

function banner(problems) {
  const b = document.getElementById("banner");
  const text = problems.join(" ");
  if (b.textContent !== text) b.textContent = text;
  b.hidden = problems.length === 0;
}

async function refresh() {
  const [status, limits, refused, rlqs] = await Promise.allSettled(
    ["ui/status", "ui/limits", "ui/refused", "ui/rlqs"].map(getJSON));
  const problems = [];
  const draws = [[status, drawService, "service"], [limits, drawLimits, "limits"], [refused, drawRefused, "refused buckets"], [rlqs, drawRLQS, "RLQS"]];
  for (const [res, draw, what] of draws) {
    if (res.status === "rejected") {
      problems.push("Cannot read the " + what + ": " + res.reason.message + ".");
      continue;
    }
    try {
      draw(res.value);
    } catch (e) {
      problems.push("Cannot show the " + what + ": " + e.message + ".");
    }
  }
  if (draws.every(([res]) => res.status === "rejected")) {
    problems.splice(0, problems.length, "The service does not answer (" + status.reason.message + "): the page shows what it read last, and keeps asking.");
  }
  if (status.status === "fulfilled" && !status.value.store.ok) {
    const s = status.value.store;
    problems.unshift("Store down: " + s.name + " does not answer" + (s.error ? " (" + s.error + ")" : "") + ".");
  }
  if (status.status === "fulfilled") problems.push(...regionProblems(status.value.regions));
  banner(problems);
  if (draws.some(([res]) => res.status === "fulfilled")) {
    document.getElementById("updated").textContent = "Updated " + new Date().toLocaleTimeString();
  }
}

function start() {
  addEntry("", "");
  document.getElementById("explain-add").addEventListener("click", () => addEntry("", "").focus());
  document.getElementById("explain-form").addEventListener("submit", explain);
  const tick = () => refresh().finally(() => setTimeout(tick, REFRESH_MS));
  tick();
}

start();
