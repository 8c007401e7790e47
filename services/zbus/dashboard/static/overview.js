// Overview: the catalog, the cluster-wide charts, the catalog's heartbeat and beacon
// figures, and every registered service with its state and its admin API's figures.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $, el, duration } = ZB;
  const CHARTS = [
    ["events_per_s", "chart-events", "events/s"],
    ["jobs_per_s", "chart-jobs", "jobs/s"],
    ["errors_per_s", "chart-errors", "errors/s"],
  ];

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

  // The launcher's restart count (`zbus up` only), after the rest of the cell.
  function restartsOf(live) {
    if (!live || typeof live.restarts !== "number") return "";
    const text = ` · ${live.restarts} restart${live.restarts === 1 ? "" : "s"}`;
    return el("span", { class: live.restarts ? "" : "muted", data: { restarts: String(live.restarts) }, text });
  }

  function liveCell(live) {
    const cell = liveParts(live);
    cell.append(restartsOf(live));
    return cell;
  }

  function liveParts(live) {
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
    const admin = ZB.httpUrl(adminText);
    return el(
      "tr",
      { id: `service-${record.name}`, data: { service: record.name, state } },
      el("td", { data: { field: "name" } }, el("strong", { text: record.name })),
      el("td", { data: { field: "function" }, text: info.function ?? "" }),
      el("td", { data: { field: "state" } }, el("span", { class: `state state-${state.replace(/ /g, "-")}`, text: state })),
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
    // A service the launcher restarts or gave up on may have no registration: a row of
    // its own, in the launcher's state ("given up", "restarting").
    const registered = new Set(records.map((r) => r.name));
    const down = [...live.values()]
      .filter((e) => e.supervised && !registered.has(e.name))
      .map((e) => ({ name: e.name, state: e.supervised, info: { admin: e.admin } }));
    const rows = [...records, ...down];
    $("services-body").replaceChildren(...rows.map((r) => serviceRow(r, live.get(r.name), now)));
    $("services-table").hidden = rows.length === 0;
    $("services-empty").hidden = rows.length !== 0;
    const counts = {};
    for (const r of rows) counts[r.state] = (counts[r.state] || 0) + 1;
    $("services-count").textContent = rows.length
      ? `(${Object.entries(counts).map(([s, n]) => `${n} ${s}`).join(", ")})`
      : "";
  }

  function renderCatalog(catalog) {
    const summary = $("catalog-summary");
    if (!catalog) {
      summary.textContent = "catalog: no answer";
      return;
    }
    const endpoints = Object.entries(catalog.endpoints || {})
      .filter(([name, value]) => name !== "admin" && value)
      .map(([name, value]) => `${name} ${value}`);
    summary.replaceChildren(
      el("strong", { text: "catalog" }),
      ` v${catalog.version} · up ${duration(catalog.uptime_seconds)} · `,
      el("span", { class: `ready-${Boolean(catalog.ready)}`, text: catalog.ready ? "ready" : "not ready" }),
      restartsOf(catalog),
      endpoints.length ? el("span", { class: "muted", text: ` · ${endpoints.join(" · ")}` }) : "",
    );
    summary.dataset.ready = String(Boolean(catalog.ready));
  }

  function figure(name, value, key) {
    return el("div", {}, el("dt", { text: name }), el("dd", { data: { figure: key }, text: value }));
  }

  function renderFigures(catalog, history) {
    const box = $("catalog-figures");
    const f = catalog && catalog.figures;
    if (!f) {
      box.replaceChildren();
      return;
    }
    const ev = f.events || {};
    const points = (history && history.points) || {};
    const beats = (points.heartbeats_per_s || []).filter((v) => typeof v === "number");
    const b = f.beacon;
    box.replaceChildren(
      figure("heartbeats/s", beats.length ? ZB.rate(beats[beats.length - 1]) : "–", "heartbeat-rate"),
      figure("heartbeats UDP / TCP", `${ZB.num(ev.heartbeats_udp)} / ${ZB.num(ev.heartbeats_tcp)}`, "heartbeats"),
      figure("heartbeats from unknown nodes", ZB.num(ev.heartbeats_unknown), "heartbeats-unknown"),
      figure("heartbeats sent", ZB.num(ev.heartbeats_sent), "heartbeats-sent"),
      figure("heartbeat interval", `${f.heartbeat_interval} s × ${f.heartbeat_misses} misses`, "interval"),
      figure("registrations", `${ZB.num(ev.registrations_approved)} approved`, "registrations"),
      figure(
        "beacon",
        b ? `${ZB.num(b.sent)} sent, ${ZB.num(b.errors)} errors, every ${b.interval} s to ${b.endpoint} (${b.format})` : "off",
        "beacon",
      ),
    );
  }

  function renderCharts(history) {
    const points = (history && history.points) || { time: [] };
    const now = points.time.length ? points.time[points.time.length - 1] : Date.now() / 1000;
    for (const [key, id, unit] of CHARTS) {
      const last = ZB.drawChart($(id), points.time, points[key] || [], {
        now,
        window: (history && history.window) || 900,
        unit,
        title: unit,
      });
      $(`${id}-last`).textContent = last === null ? "collecting…" : ZB.rate(last);
    }
    $("history-note").textContent = history
      ? `one sample every ${history.interval} s, kept 15 min in the catalog's memory`
      : "";
  }

  async function refresh(cluster, errors) {
    const [services, history] = await Promise.allSettled([
      ZB.getJSON("/api/v1/services"),
      ZB.getJSON("/api/v1/history"),
    ]);
    if (services.status === "fulfilled") {
      renderServices(services.value.services || [], cluster);
      document.body.dataset.loaded = "true";
    } else {
      errors.push(services.reason.message);
    }
    const h = history.status === "fulfilled" ? history.value : null;
    if (history.status === "rejected") errors.push(history.reason.message);
    renderCatalog(cluster && cluster.catalog);
    renderFigures(cluster && cluster.catalog, h);
    renderCharts(h);
  }

  ZB.pages = ZB.pages || {};
  ZB.pages.overview = { refresh };
})();
