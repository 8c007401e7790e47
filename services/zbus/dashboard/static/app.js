// The dashboard's frame: the page chosen by the address's #fragment (#overview, #bus,
// #broker, #pipeline, #logs), refreshed every REFRESH_MS without reloading; the admin
// token field; the error banner. Each page is in its own file (overview.js, bus.js,
// broker.js, pipeline.js, logs.js) and exposes refresh(cluster, errors) and init().
// The body carries data-page, data-loaded, data-refreshes and data-errors for whoever
// reads the page by structure rather than by look.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $ } = ZB;
  const REFRESH_MS = 2000;
  const PAGES = ["overview", "bus", "broker", "pipeline", "logs"];
  let refreshes = 0;
  let timer = null;
  let running = null;

  function current() {
    const name = location.hash.replace(/^#/, "");
    return PAGES.includes(name) ? name : "overview";
  }

  function show(page) {
    for (const name of PAGES) {
      $(`page-${name}`).hidden = name !== page;
      const tab = $(`tab-${name}`);
      tab.classList.toggle("active", name === page);
      if (name === page) tab.setAttribute("aria-current", "page");
      else tab.removeAttribute("aria-current");
    }
    document.body.dataset.page = page;
  }

  function showErrors(errors) {
    const banner = $("error-banner");
    banner.hidden = errors.length === 0;
    banner.textContent = errors.length
      ? `The catalog's admin API did not answer as expected (retrying every ${REFRESH_MS / 1000} s):\n${errors.join("\n")}`
      : "";
    document.body.dataset.errors = String(errors.length);
  }

  async function refresh() {
    const page = current();
    show(page);
    const errors = [];
    let cluster = null;
    try {
      cluster = await ZB.getJSON("/api/v1/cluster");
    } catch (err) {
      errors.push(err.message);
    }
    try {
      await ZB.pages[page].refresh(cluster, errors);
    } catch (err) {
      errors.push(err.message || String(err));
    }
    if (page !== current()) return; // the page changed meanwhile: its own refresh follows
    showErrors(errors);
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    document.body.dataset.refreshed = page;
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  /** One refresh at a time; the next one REFRESH_MS after the last ended. */
  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (running) await running;
      if (!document.hidden || refreshes === 0) {
        running = refresh().finally(() => {
          running = null;
        });
        await running;
      }
      schedule(REFRESH_MS);
    }, delay);
  }

  ZB.refreshSoon = () => schedule(0);

  function start() {
    for (const name of PAGES) {
      if (ZB.pages[name].init) ZB.pages[name].init();
    }
    const token = $("admin-token");
    token.value = ZB.token();
    $("token-state").textContent = token.value ? "token set" : "no token";
    const save = () => {
      ZB.setToken(token.value.trim());
      $("token-state").textContent = token.value.trim() ? "token set" : "no token";
    };
    token.addEventListener("change", save);
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      save();
    });
    window.addEventListener("hashchange", ZB.refreshSoon);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) ZB.refreshSoon();
    });
    show(current());
    schedule(0);
  }

  start();
})();
