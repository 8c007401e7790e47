// Logs: the records the catalog gathered from the whole cluster, in time order (the
// newest at the bottom), filtered by service, minimum level and text. The filters are
// kept in the page's address, so a filtered view can be linked.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $, el } = ZB;
  const LOG_LIMIT = 100;
  const SKIP = new Set(["ts", "level", "service", "logger", "msg", "exc"]);
  const FILTERS = [
    ["service", "log-service"],
    ["level", "log-level"],
    ["text", "log-text"],
  ];
  let asked = 0; // the latest request; older answers are dropped

  function logRow(record) {
    const level = String(record.level || "");
    const message = el("td", { data: { field: "msg" } }, el("span", { text: record.msg ?? "" }));
    const extras = Object.entries(record)
      .filter(([key]) => !SKIP.has(key))
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

  function render(answer, filtered) {
    // The catalog answers newest first as records arrived; a tail reads in time order
    // (by the records' own UTC timestamps, arrival order among equal ones).
    const records = [...(answer.logs || [])]
      .reverse()
      .map((r, i) => [String(r.ts ?? ""), i, r])
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[1] - b[1]))
      .map(([, , r]) => r);
    const kept = answer.services || {};
    ZB.fillSelect($("log-service"), Object.keys(kept).sort(), "any service");
    $("logs-body").replaceChildren(...records.map(logRow));
    $("logs-table").hidden = records.length === 0;
    const empty = $("logs-empty");
    empty.hidden = records.length !== 0;
    empty.textContent = filtered
      ? "no log records match the filters"
      : Object.keys(kept).length
        ? "no log records"
        : "no log records (the catalog gathers them when the services ship their logs over the event bus)";
    $("logs-kept").textContent = Object.keys(kept).length
      ? `kept: ${Object.entries(kept).map(([s, n]) => `${s} ${n}`).join(", ")}`
      : "";
  }

  async function refresh(cluster, errors) {
    const query = new URLSearchParams({ limit: String(LOG_LIMIT) });
    let filtered = false;
    for (const [key, id] of FILTERS) {
      const value = $(id).value.trim();
      if (value) {
        query.set(key, value);
        filtered = true;
      }
    }
    const mine = ++asked;
    try {
      const answer = await ZB.getJSON(`/api/v1/logs?${query}`);
      if (mine === asked) render(answer, filtered);
    } catch (err) {
      errors.push(err.message);
    }
  }

  function applyFilters() {
    const query = new URLSearchParams(location.search);
    for (const [key, id] of FILTERS) {
      const value = $(id).value.trim();
      if (value) query.set(key, value);
      else query.delete(key);
    }
    const search = query.toString();
    history.replaceState(null, "", `${location.pathname}${search ? `?${search}` : ""}${location.hash}`);
    ZB.refreshSoon();
  }

  function init() {
    // The filters start from the page's query (?service=broker&level=warning&text=...).
    const query = new URLSearchParams(location.search);
    const level = (query.get("level") || "").toLowerCase();
    if ([...$("log-level").options].some((o) => o.value === level)) $("log-level").value = level;
    $("log-text").value = query.get("text") || "";
    const service = query.get("service") || "";
    if (service) $("log-service").append(el("option", { value: service, text: service }));
    $("log-service").value = service;
    let typing = null;
    $("log-level").addEventListener("change", applyFilters);
    $("log-service").addEventListener("change", applyFilters);
    $("log-text").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(applyFilters, 250);
    });
    $("log-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      applyFilters();
    });
  }

  ZB.pages = ZB.pages || {};
  ZB.pages.logs = { refresh, init };
})();
