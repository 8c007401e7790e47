// Shared helpers of the dashboard's pages: DOM building (textContent only, never HTML
// from data), number and time formats, the catalog's API, the admin token and actions.
"use strict";

window.ZB = window.ZB || {};

(() => {
  const ZB = window.ZB;
  const TOKEN_KEY = "zbus-admin-token";

  ZB.$ = (id) => document.getElementById(id);

  ZB.el = function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "class") node.className = value;
      else if (key === "data") Object.assign(node.dataset, value);
      else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) {
      if (child !== null && child !== undefined && child !== false) node.append(child);
    }
    return node;
  };

  ZB.duration = function duration(seconds) {
    if (typeof seconds !== "number" || !isFinite(seconds)) return "–";
    const s = Math.max(0, seconds);
    if (s < 10) return `${s.toFixed(1)} s`;
    if (s < 60) return `${Math.round(s)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  };

  ZB.num = function num(value) {
    if (typeof value !== "number" || !isFinite(value)) return "–";
    return value.toLocaleString("en-US", { maximumFractionDigits: 1 });
  };

  ZB.rate = function rate(value) {
    if (typeof value !== "number" || !isFinite(value)) return "–";
    if (value === 0) return "0/s";
    if (value < 0.1) return `${value.toFixed(3)}/s`;
    return `${ZB.num(Math.round(value * 10) / 10)}/s`;
  };

  ZB.bytes = function bytes(value) {
    if (typeof value !== "number" || !isFinite(value)) return "–";
    const units = ["B", "kB", "MB", "GB", "TB"];
    let v = value;
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return `${i ? v.toFixed(1) : v} ${units[i]}`;
  };

  ZB.clock = function clock(unixSeconds) {
    if (typeof unixSeconds !== "number" || !isFinite(unixSeconds)) return "–";
    return new Date(unixSeconds * 1000).toISOString().slice(11, 19);
  };

  ZB.ago = (unixSeconds) =>
    typeof unixSeconds === "number" ? `${ZB.duration(Date.now() / 1000 - unixSeconds)} ago` : "–";

  ZB.short = function short(text, max) {
    const s = typeof text === "string" ? text : JSON.stringify(text);
    if (s === undefined) return "";
    return s.length > max ? `${s.slice(0, max - 1)}…` : s;
  };

  ZB.httpUrl = function httpUrl(value) {
    if (typeof value !== "string") return null;
    try {
      const url = new URL(value);
      return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
    } catch {
      return null;
    }
  };

  // ---------------------------------------------------------------- the API

  async function detailOf(response) {
    try {
      const body = await response.json();
      const detail = body && (body.detail ?? body.error);
      if (detail === undefined) return "";
      if (typeof detail === "string") return detail;
      if (Array.isArray(detail)) {
        return detail.map((d) => `${(d.loc || []).slice(1).join(".") || "body"}: ${d.msg}`).join("; ");
      }
      return JSON.stringify(detail);
    } catch {
      return "";
    }
  }

  ZB.getJSON = async function getJSON(url) {
    let response;
    try {
      response = await fetch(url, { cache: "no-store", headers: { Accept: "application/json" } });
    } catch (err) {
      throw new Error(`${url}: ${err.message || "no answer"}`);
    }
    if (!response.ok) {
      const detail = await detailOf(response);
      throw new Error(`${url}: HTTP ${response.status}${detail ? `: ${detail}` : ""}`);
    }
    return response.json();
  };

  /** A service's admin API, through the catalog's proxy. */
  ZB.proxy = (service, path, query) => {
    const q = query ? new URLSearchParams(Object.entries(query).filter(([, v]) => v !== "" && v !== null && v !== undefined)) : null;
    const qs = q && q.toString() ? `?${q}` : "";
    return ZB.getJSON(`/api/v1/proxy/${encodeURIComponent(service)}/${path}${qs}`);
  };

  ZB.token = () => sessionStorage.getItem(TOKEN_KEY) || "";
  ZB.setToken = (value) => {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  };

  /** The outcome of the last action, shown under the header until the next one. */
  function report(outcome, text) {
    const box = ZB.$("action-status");
    box.hidden = false;
    box.dataset.outcome = outcome;
    box.className = `action action-${outcome}`;
    box.textContent = text;
  }

  /**
   * An action (POST) on a service through the catalog's proxy, with the admin token when
   * one is set. Shows what happened; returns the answer's body, or null when refused.
   */
  ZB.act = async function act(label, service, path, body) {
    const headers = { Accept: "application/json", "Content-Type": "application/json" };
    const token = ZB.token();
    if (token) headers.Authorization = `Bearer ${token}`;
    report("pending", `${label}…`);
    let response;
    try {
      response = await fetch(`/api/v1/proxy/${encodeURIComponent(service)}/${path}`, {
        method: "POST",
        headers,
        body: JSON.stringify(body || {}),
        cache: "no-store",
      });
    } catch (err) {
      report("refused", `${label}: no answer from the catalog (${err.message || err})`);
      return null;
    }
    if (!response.ok) {
      const detail = await detailOf(response);
      let why = `HTTP ${response.status}${detail ? `: ${detail}` : ""}`;
      if (response.status === 401) {
        why += token
          ? " (the admin token entered is not the one the cluster has)"
          : " (the cluster has an admin token: enter it at the top of the page)";
      }
      report("refused", `${label} refused: ${why}`);
      return null;
    }
    const answer = await response.json().catch(() => ({}));
    report("ok", `${label}: done`);
    ZB.refreshSoon();
    return answer;
  };

  /** Parse a JSON form field; throws with the field's name. */
  ZB.parseJSON = function parseJSON(text, name, fallback) {
    const t = (text || "").trim();
    if (!t) return fallback;
    try {
      return JSON.parse(t);
    } catch (err) {
      throw new Error(`${name} is not JSON: ${err.message}`);
    }
  };

  ZB.formError = (text) => report("refused", text);

  /** Fill a <select> with options, keeping the current choice when it is still there. */
  ZB.fillSelect = function fillSelect(select, values, blank) {
    const current = select.value;
    const wanted = [...(blank !== undefined ? [["", blank]] : []), ...values.map((v) => (Array.isArray(v) ? v : [v, v]))];
    const now = [...select.options].map((o) => [o.value, o.textContent]);
    if (JSON.stringify(now) !== JSON.stringify(wanted)) {
      select.replaceChildren(...wanted.map(([v, t]) => ZB.el("option", { value: v, text: t })));
      if (wanted.some(([v]) => v === current)) select.value = current;
    }
    return select.value;
  };

  /** Services of one kind (the name their admin API gives), from the cluster view. */
  ZB.servicesOf = (cluster, kind) =>
    ((cluster && cluster.services) || [])
      .filter((s) => s.info && s.info.name === kind)
      .map((s) => s.name)
      .sort();

  ZB.emptyRow = (columns, text) =>
    ZB.el("tr", { class: "empty-row" }, ZB.el("td", { colspan: columns, class: "muted", text }));

  // A table shown a page at a time, with the controls ID-page, ID-prev and ID-next:
  // `state.cursors` holds the cursor of every page seen (the last is the current page's,
  // null the first's), `state.next` the next page's cursor as the last answer gave it.
  ZB.pageCursor = (state) => state.cursors[state.cursors.length - 1];

  ZB.showPager = function showPager(id, state) {
    ZB.$(`${id}-page`).textContent = `page ${state.cursors.length}`;
    ZB.$(`${id}-prev`).disabled = state.cursors.length <= 1;
    ZB.$(`${id}-next`).disabled = !state.next;
  };

  ZB.initPager = function initPager(id, state) {
    ZB.$(`${id}-next`).addEventListener("click", () => {
      if (state.next) state.cursors.push(state.next);
      ZB.refreshSoon();
    });
    ZB.$(`${id}-prev`).addEventListener("click", () => {
      if (state.cursors.length > 1) state.cursors.pop();
      ZB.refreshSoon();
    });
  };
})();
