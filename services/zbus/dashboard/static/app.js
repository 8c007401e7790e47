// The zbus cluster dashboard: reads the catalog's admin API every REFRESH_MS and
// renders the services, their live figures and the recent logs. Everything is built
// with DOM calls and textContent (never HTML from data), and the rows carry stable
// ids and data attributes (data-service, data-state, data-live, data-log-level) for
// whoever reads the page by structure rather than by look.
"use strict";

(() => {
  const REFRESH_MS = 2000;
  const LOG_LIMIT = 50;
  const LOG_EXTRA_SKIP = new Set(["ts", "level", "service", "logger", "msg", "exc"]);

  const $ = (id) => document.getElementById(id);
  const filters = { level: "", text: "" };
  let refreshes = 0;
  let logsAsked = 0; // the latest logs request; older answers are dropped

  // ------------------------------------------------------------------ helpers

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "class") node.className = value;
      else if (key === "data") Object.assign(node.dataset, value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }

  function duration(seconds) {
    if (typeof seconds !== "number" || !isFinite(seconds)) return "–";
    const s = Math.max(0, seconds);
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 60) return `${Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  function httpUrl(value) {
    if (typeof value !== "string") return null;
    try {
      const url = new URL(value);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch {
      return null;
    }
  }

  async function getJSON(url) {
    let response;
    try {
      response = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
    } catch (err) {
      throw new Error(`${url}: ${err.message || "no answer"}`);
    }
    if (!response.ok) {
      let detail = "";
      try {
        const body = await response.json();
        if (body && body.detail) detail = `: ${typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail)}`;
      } catch {
        // not JSON: the status says enough
      }
      throw new Error(`${url}: HTTP ${response.status}${detail}`);
    }
    return response.json();
  }

  function logsUrl() {
    const query = new URLSearchParams({ limit: String(LOG_LIMIT) });
    if (filters.level) query.set("level", filters.level);
    if (filters.text) query.set("text", filters.text);
    return `/api/v1/logs?${query}`;
  }

  // ------------------------------------------------------------------ zbus

  function endpointsOf(info) {
    const list = el("ul");
    const endpoints = info && typeof info.endpoints === "object" && info.endpoints ? info.endpoints : null;
    if (endpoints) {
      for (const [name, value] of Object.entries(endpoints)) {
        if (name === "admin" || !value) continue;
        list.append(el("li", { data: { endpoint: name } }, `${name} `, el("code", { text: value })));
      }
    }
    if (!list.childElementCount && info && info.ip !== undefined) {
      list.append(el("li", {}, el("code", { text: `${info.ip}:${info.port}` })));
    }
    return list;
  }

  function liveCell(live) {
    const cell = el("td", { data: { field: "live", live: "none" } });
    if (!live) return cell;
    if (live.error) {
      cell.dataset.live = "error";
      cell.append(el("span", { class: "live-error", text: live.error }));
      return cell;
    }
    if (!live.info && live.ready === null) {
      cell.append(el("span", { class: "muted", text: "no admin API" }));
      return cell;
    }
    cell.dataset.live = "ok";
    const info = live.info || {};
    const parts = [];
    if (info.version) parts.push(`v${info.version}`);
    if (typeof info.uptime_seconds === "number") parts.push(`up ${duration(info.uptime_seconds)}`);
    if (parts.length) cell.append(el("span", { text: `${parts.join(" · ")} ` }));
    if (typeof live.ready === "boolean") {
      cell.dataset.ready = String(live.ready);
      const failing = Object.entries(live.checks || {})
        .filter(([, ok]) => !ok)
        .map(([name]) => name);
      const text = live.ready ? "ready" : `not ready${failing.length ? ` (${failing.join(", ")})` : ""}`;
      cell.append(el("span", { class: `ready-${live.ready}`, text }));
    }
    return cell;
  }

  function serviceRow(record, live, now) {
    const info = record.info || {};
    const state = String(record.state || "unknown");
    const adminText = (live && live.admin) || info.admin;
    const admin = httpUrl(adminText);
    return el(
      "tr",
      { id: `service-${record.name}`, data: { service: record.name, state } },
      el("td", { data: { field: "name" } }, el("strong", { text: record.name })),
      el("td", { data: { field: "function" }, text: info.function ?? "" }),
      el("td", { data: { field: "state" } }, el("span", { class: `state state-${state}`, text: state })),
      el("td", {
        data: { field: "heartbeat" },
        text: typeof record.last_heartbeat === "number" ? `${duration(now - record.last_heartbeat)} ago` : "–",
      }),
      el("td", { data: { field: "uptime" }, text: duration(record.uptime_seconds) }),
      el("td", { data: { field: "endpoints" } }, endpointsOf(info)),
      el("td", { data: { field: "admin" } }, admin ? el("a", { href: admin, target: "_blank", rel: "noopener", text: adminText }) : ""),
      liveCell(live),
    );
  }

  function renderServices(records, cluster) {
    const live = new Map();
    for (const entry of (cluster && cluster.services) || []) live.set(entry.name, entry);
    const now = cluster && typeof cluster.time === "number" ? cluster.time : Date.now() / 1000;
    $("services-body").replaceChildren(...records.map((r) => serviceRow(r, live.get(r.name), now)));
    $("services-table").hidden = records.length === 0;
    $("services-empty").hidden = records.length !== 0;
    const counts = {};
    for (const r of records) counts[r.state] = (counts[r.state] || 0) + 1;
    $("services-count").textContent = records.length
      ? `(${Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ")})`
      : "";
  }

  function renderCatalog(catalog) {
    const summary = $("catalog-summary");
    if (!catalog) return;
    const endpoints = Object.entries(catalog.endpoints || {})
      .filter(([name, value]) => name !== "admin" && value)
      .map(([name, value]) => `${name} ${value}`);
    summary.replaceChildren(
      el("strong", { text: "catalog" }),
      ` v${catalog.version} · up ${duration(catalog.uptime_seconds)} · `,
      el("span", { class: `ready-${Boolean(catalog.ready)}`, text: catalog.ready ? "ready" : "not ready" }),
      endpoints.length ? el("span", { class: "muted", text: ` · ${endpoints.join(" · ")}` }) : "",
    );
    summary.dataset.ready = String(Boolean(catalog.ready));
  }

  // ------------------------------------------------------------------ logs

  function logRow(record) {
    const level = String(record.level || "");
    const message = el("td", { data: { field: "msg" } }, el("span", { text: record.msg ?? "" }));
    const extras = Object.entries(record)
      .filter(([key]) => !LOG_EXTRA_SKIP.has(key))
      .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`);
    if (extras.length) message.append(el("span", { class: "extra mono", text: extras.join(" ") }));
    if (record.exc) message.append(el("pre", { class: "exc mono", text: record.exc }));
    return el(
      "tr",
      { class: "log", data: { logLevel: level, logService: record.service ?? "" } },
      el("td", { class: "mono", data: { field: "ts" }, text: record.ts ?? "" }),
      el("td", { data: { field: "level" } }, el("span", { class: `level level-${level}`, text: level })),
      el("td", { data: { field: "service" }, text: record.service ?? "" }),
      message,
    );
  }

  function renderLogs(answer) {
    const records = answer.logs || [];
    $("logs-body").replaceChildren(...records.map(logRow));
    $("logs-table").hidden = records.length === 0;
    const empty = $("logs-empty");
    empty.hidden = records.length !== 0;
    const kept = answer.services || {};
    const filtered = filters.level || filters.text;
    empty.textContent = filtered
      ? "no log records match the filters"
      : Object.keys(kept).length
        ? "no log records"
        : "no log records (the catalog gathers them when the services ship their logs over the event bus)";
    $("logs-kept").textContent = Object.keys(kept).length
      ? `kept: ${Object.entries(kept).map(([s, n]) => `${s} ${n}`).join(", ")}`
      : "";
  }

  async function refreshLogs() {
    const asked = ++logsAsked;
    const answer = await getJSON(logsUrl());
    if (asked === logsAsked) renderLogs(answer);
  }

  // ------------------------------------------------------------------ refresh

  function showErrors(errors) {
    const banner = $("error-banner");
    banner.hidden = errors.length === 0;
    banner.textContent = errors.length
      ? `The catalog's admin API did not answer as expected (retrying every ${REFRESH_MS / 1000} s):\n${errors.join("\n")}`
      : "";
    document.body.dataset.errors = String(errors.length);
  }

  async function refresh() {
    const [services, cluster, logs] = await Promise.allSettled([
      getJSON("/api/v1/services"),
      getJSON("/api/v1/cluster"),
      refreshLogs(),
    ]);
    const errors = [];
    const view = cluster.status === "fulfilled" ? cluster.value : null;
    if (cluster.status === "rejected") errors.push(cluster.reason.message);
    if (services.status === "fulfilled") {
      renderServices(services.value.services || [], view);
    } else {
      errors.push(services.reason.message);
    }
    if (view) renderCatalog(view.catalog);
    else $("catalog-summary").textContent = "catalog: no answer";
    if (logs.status === "rejected") errors.push(logs.reason.message);
    showErrors(errors);
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    if (services.status === "fulfilled") document.body.dataset.loaded = "true";
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  async function loop() {
    try {
      if (!document.hidden || refreshes === 0) await refresh();
    } catch (err) {
      showErrors([err.message || String(err)]);
    } finally {
      setTimeout(loop, REFRESH_MS);
    }
  }

  function applyFilters() {
    filters.level = $("log-level").value;
    filters.text = $("log-text").value.trim();
    const query = new URLSearchParams(location.search);
    for (const key of ["level", "text"]) {
      if (filters[key]) query.set(key, filters[key]);
      else query.delete(key);
    }
    const search = query.toString();
    history.replaceState(null, "", `${location.pathname}${search ? `?${search}` : ""}`);
    refreshLogs().catch((err) => showErrors([err.message]));
  }

  function start() {
    // The filters start from the page's query (?level=warning&text=...), so a view can be linked.
    const query = new URLSearchParams(location.search);
    const level = (query.get("level") || "").toLowerCase();
    if ([...$("log-level").options].some((o) => o.value === level)) $("log-level").value = level;
    $("log-text").value = query.get("text") || "";
    filters.level = $("log-level").value;
    filters.text = $("log-text").value.trim();

    let typing = null;
    $("log-level").addEventListener("change", applyFilters);
    $("log-text").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(applyFilters, 250);
    });
    $("log-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      applyFilters();
    });
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) refresh().catch((err) => showErrors([err.message]));
    });
    loop();
  }

  start();
})();
