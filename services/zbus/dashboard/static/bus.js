// Bus: the sequence and rate, the replicas and their roles (a replicated bus), each front
// door's peers, drops and rejects, the topics (paged, filtered by prefix, with their
// rates from the catalog's samples), a live tail of events under a prefix, and a form to
// publish an event.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $, el } = ZB;
  const TOPICS_PAGE = 50;
  const TAIL_KEEP = 100;
  const state = {
    service: "",
    cursors: [null], // topic cursors of the pages seen; the last is the current page's
    next: null,
    tail: [],
    tailAfter: 0,
    tailPrefix: "",
    tailService: "",
  };

  function renderStats(bus) {
    const c = bus.counters || {};
    const total = (m) => Object.values(m || {}).reduce((a, b) => a + b, 0);
    $("bus-stats").replaceChildren(
      ...[
        ["sequence", ZB.num(bus.sequence), "sequence"],
        ["publish rate", ZB.rate(bus.publish_rate), "rate"],
        ["events in the log", ZB.num(bus.log && bus.log.events), "log-events"],
        ["topics", ZB.num(bus.log && bus.log.topics), "topics"],
        ["log size", ZB.bytes(bus.log && bus.log.size_bytes), "log-size"],
        ["received / stored / duplicates", `${ZB.num(c.received)} / ${ZB.num(c.stored)} / ${ZB.num(c.duplicates)}`, "stored"],
        ["rejected", ZB.num(total(c.rejected)), "rejected"],
        ["dropped for slow peers", ZB.num(total(c.dropped)), "dropped"],
      ].map(([name, value, key]) => el("div", {}, el("dt", { text: name }), el("dd", { data: { figure: key }, text: value }))),
    );
    const rows = [];
    const rejected = c.rejected || {};
    const dropped = c.dropped || {};
    for (const [door, d] of Object.entries(bus.doors || {})) {
      const peers = Object.entries(d.peers || {}).map(([k, v]) => `${k} ${v}`).join(", ");
      const sockets = door === "spec" ? ["snapshot", "publisher", "collector", "stream"] : [door];
      const sum = (m) => sockets.reduce((a, s) => a + (m[s] || 0), 0) + (m === rejected ? d.malformed || 0 : 0);
      rows.push(
        el(
          "tr",
          { data: { door } },
          el("td", { text: door }),
          el("td", {}, el("code", { text: d.endpoint || "–" })),
          el("td", { data: { field: "subscribers" }, text: ZB.num(d.subscribers) }),
          el("td", { data: { field: "subscriptions" }, text: ZB.num(d.subscriptions) }),
          el("td", { class: "muted", text: peers }),
          el("td", { data: { field: "rejected" }, text: ZB.num(sum(rejected)) }),
          el("td", { data: { field: "dropped" }, text: ZB.num(sum(dropped)) }),
        ),
      );
    }
    $("doors-body").replaceChildren(...rows);
  }

  // Each bus's /api/v1/replication: a row per replica of a group; none for a bus that is
  // not replicated (role "single"). A replica that does not answer shows no role.
  async function refreshReplicas(buses) {
    const answers = await Promise.allSettled(buses.map((b) => ZB.proxy(b, "api/v1/replication")));
    const rows = [];
    answers.forEach((answer, i) => {
      const r = (answer.status === "fulfilled" && answer.value) || {};
      if (r.role === "single") return;
      rows.push(
        el(
          "tr",
          { data: { replica: buses[i], role: r.role || "" } },
          el("td", { text: buses[i] }),
          el("td", { data: { field: "role" }, text: r.role || "–" }),
          el("td", { text: ZB.num(r.epoch) }),
          el("td", { text: ZB.num(r.log_end) }),
          el("td", { text: ZB.num(r.high_watermark) }),
        ),
      );
    });
    const replicated = answers.some((a) => a.status === "fulfilled" && a.value && a.value.role && a.value.role !== "single");
    $("bus-replicas").hidden = !replicated;
    $("replicas-body").replaceChildren(...(replicated ? rows : []));
  }

  function renderTopics(answer, rates) {
    const topics = answer.topics || [];
    state.next = answer.next || null;
    $("topics-body").replaceChildren(
      ...(topics.length
        ? topics.map((t) =>
            el(
              "tr",
              { data: { topic: t.topic } },
              el("td", {}, el("code", { text: t.topic })),
              el("td", { data: { field: "count" }, text: ZB.num(t.count) }),
              el("td", { data: { field: "rate" }, text: ZB.rate(rates[t.topic]) }),
              el("td", { data: { field: "last-seq" }, text: ZB.num(t.last_seq) }),
              el("td", { class: "mono", text: t.last_ts || "–" }),
              el("td", { text: ZB.bytes(t.bytes) }),
            ),
          )
        : [ZB.emptyRow(6, "no topics under this prefix")]),
    );
    ZB.showPager("topics", state);
  }

  function renderTail() {
    $("tail-body").replaceChildren(
      ...(state.tail.length
        ? state.tail.map((e) =>
            el(
              "tr",
              { data: { seq: e.seq, topic: e.topic } },
              el("td", { text: ZB.num(e.seq) }),
              el("td", { class: "mono", text: e.ts }),
              el("td", {}, el("code", { text: e.topic })),
              el("td", { text: e.producer }),
              el("td", { class: "mono", text: ZB.short(e.data, 200) }),
            ),
          )
        : [ZB.emptyRow(5, "no events under this prefix yet")]),
    );
  }

  async function refreshTail(service) {
    const prefix = $("tail-prefix").value;
    if (prefix !== state.tailPrefix || service !== state.tailService) {
      Object.assign(state, { tail: [], tailAfter: 0, tailPrefix: prefix, tailService: service });
    }
    if ($("tail-paused").checked) return;
    const answer = await ZB.proxy(service, "api/v1/events", { prefix, after: state.tailAfter, limit: TAIL_KEEP });
    if (prefix !== state.tailPrefix || service !== state.tailService) return; // changed meanwhile
    const fresh = answer.events || [];
    if (fresh.length) {
      state.tailAfter = fresh[0].seq;
      state.tail = [...fresh, ...state.tail].slice(0, TAIL_KEEP);
    }
    renderTail();
  }

  async function refresh(cluster, errors) {
    const buses = ZB.servicesOf(cluster, "eventbus");
    const service = ZB.fillSelect($("bus-service"), buses);
    $("bus-none").hidden = buses.length !== 0;
    $("bus-content").hidden = buses.length === 0;
    if (!service) return;
    if (service !== state.service) Object.assign(state, { service, cursors: [null], next: null });
    const prefix = $("topic-prefix").value;
    const after = ZB.pageCursor(state);
    const [bus, topics, rates, tail, replicas] = await Promise.allSettled([
      ZB.proxy(service, "api/v1/bus"),
      ZB.proxy(service, "api/v1/topics", { prefix, after, limit: TOPICS_PAGE }),
      ZB.getJSON(`/api/v1/history/topics?${new URLSearchParams({ service, prefix })}`),
      refreshTail(service),
      refreshReplicas(buses),
    ]);
    if (bus.status === "fulfilled") renderStats(bus.value);
    else errors.push(bus.reason.message);
    if (topics.status === "fulfilled") {
      renderTopics(topics.value, rates.status === "fulfilled" ? rates.value.rates || {} : {});
    } else errors.push(topics.reason.message);
    if (rates.status === "rejected") errors.push(rates.reason.message);
    if (tail.status === "rejected") errors.push(tail.reason.message);
    if (replicas.status === "rejected") errors.push(replicas.reason.message);
  }

  async function publish(event) {
    event.preventDefault();
    let data;
    try {
      data = ZB.parseJSON($("publish-data").value, "data", null);
    } catch (err) {
      ZB.formError(err.message);
      return;
    }
    const topic = $("publish-topic").value.trim();
    const answer = await ZB.act(`publish to ${topic || "(no topic)"}`, state.service, "api/v1/events", {
      topic,
      data,
      producer: "dashboard",
    });
    if (answer) $("action-status").textContent = `published ${answer.topic} as sequence ${answer.seq}`;
  }

  function init() {
    let typing = null;
    const reset = () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        state.cursors = [null];
        ZB.refreshSoon();
      }, 250);
    };
    $("topic-prefix").addEventListener("input", reset);
    $("tail-prefix").addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(ZB.refreshSoon, 250);
    });
    $("bus-service").addEventListener("change", ZB.refreshSoon);
    ZB.initPager("topics", state);
    $("publish-form").addEventListener("submit", publish);
  }

  ZB.pages = ZB.pages || {};
  ZB.pages.bus = { refresh, init };
})();
