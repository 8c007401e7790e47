// Broker: queues with their in/out rates (purge), workers (joined with the worker
// services' own figures by socket identity), jobs filtered by state and queue and paged
// (retry, cancel), and a form to submit a job.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $, el } = ZB;
  const JOBS_PAGE = 25;
  const MAX_WORKER_SERVICES = 20;
  const state = { service: "", cursors: [null], next: null, filter: "" };

  function jobName(job) {
    const call = Array.isArray(job.request) ? job.request[1] : null;
    return call && typeof call.callable === "string" ? call.callable : "–";
  }

  function jobSeconds(job) {
    if (typeof job.started !== "number") return null;
    const end = job.state === "running" ? Date.now() / 1000 : job.updated;
    return end - job.started;
  }

  function button(text, action, data) {
    return el("button", { type: "button", class: "small", data, on: { click: action } }, text);
  }

  function renderQueues(queues, rates) {
    $("queues-body").replaceChildren(
      ...(queues.length
        ? queues.map((q) => {
            const r = rates[q.name] || {};
            return el(
              "tr",
              { data: { queue: q.name } },
              el("td", {}, el("strong", { text: q.name })),
              ...[
                ["queued", q.queued ?? q.ready + q.waiting],
                ["running", q.running],
                ["succeeded", q.succeeded],
                ["failed", q.failed],
                ["dead", q.dead],
                ["cancelled", q.cancelled],
              ].map(([field, value]) => el("td", { data: { field }, text: ZB.num(value) })),
              el("td", { data: { field: "in" }, text: ZB.rate(r.in_per_s) }),
              el("td", { data: { field: "out" }, text: ZB.rate(r.out_per_s) }),
              el("td", { text: `${q.consumers} (${q.free_slots} free)` }),
              el(
                "td",
                {},
                button("purge", () => ZB.act(`purge ${q.name}`, state.service, `api/v1/queues/${encodeURIComponent(q.name)}/purge`), {
                  action: "purge",
                }),
              ),
            );
          })
        : [ZB.emptyRow(11, "no queues yet")]),
    );
    ZB.fillSelect($("jobs-queue"), queues.map((q) => q.name), "any queue");
  }

  async function workerFigures(cluster) {
    const figures = new Map();
    const asks = [];
    for (const name of ZB.servicesOf(cluster, "worker").slice(0, MAX_WORKER_SERVICES)) {
      asks.push(
        ZB.proxy(name, "api/v1/worker").then((w) =>
          figures.set(w.identity, { name, concurrency: w.concurrency, done: w.jobs_done, failed: w.jobs_failed }),
        ),
      );
    }
    for (const name of ZB.servicesOf(cluster, "sparkworker").slice(0, MAX_WORKER_SERVICES)) {
      asks.push(
        ZB.proxy(name, "api/v1/spark").then((s) =>
          figures.set(s.broker && s.broker.identity, { name, concurrency: s.concurrency, done: s.jobs_done, failed: s.jobs_failed }),
        ),
      );
    }
    await Promise.allSettled(asks); // a worker service that does not answer shows less
    return figures;
  }

  function renderWorkers(workers, figures) {
    $("workers-body").replaceChildren(
      ...(workers.length
        ? workers.map((w) => {
            const f = figures.get(w.identity_text) || {};
            const running = (w.jobs_running || []).length;
            return el(
              "tr",
              { data: { worker: f.name || w.identity } },
              el("td", {}, el("strong", { text: f.name || "(not registered)" })),
              el("td", { class: "mono", text: ZB.short(w.identity_text || w.identity, 40) }),
              el("td", { text: (w.queues || []).join(", ") }),
              el("td", { data: { field: "concurrency" }, text: ZB.num(f.concurrency ?? running + w.slots_free) }),
              el("td", { data: { field: "running" }, text: ZB.num(running) }),
              el("td", { data: { field: "done" }, text: f.done === undefined ? "–" : `${ZB.num(f.done)} (${ZB.num(f.failed)} failed)` }),
              el("td", { text: ZB.ago(w.last_heartbeat) }),
            );
          })
        : [ZB.emptyRow(7, "no workers connected")]),
    );
  }

  function renderJobs(answer) {
    const jobs = answer.jobs || [];
    state.next = answer.next || null;
    $("jobs-body").replaceChildren(
      ...(jobs.length
        ? jobs.map((j) => {
            const outcome = j.error ? el("span", { class: "live-error", text: ZB.short(j.error, 160) }) : ZB.short(j.result, 160);
            const actions = el("td");
            const path = `api/v1/jobs/${encodeURIComponent(j.id)}`;
            if (j.state === "failed" || j.state === "dead") {
              actions.append(button("retry", () => ZB.act(`retry ${j.id}`, state.service, `${path}/retry`), { action: "retry" }));
            }
            if (j.state === "queued") {
              actions.append(button("cancel", () => ZB.act(`cancel ${j.id}`, state.service, `${path}/cancel`), { action: "cancel" }));
            }
            return el(
              "tr",
              { data: { job: j.id, state: j.state } },
              el("td", { class: "mono", text: j.id }),
              el("td", { text: j.queue }),
              el("td", { text: jobName(j) }),
              el("td", { data: { field: "state" } }, el("span", { class: `job job-${j.state}`, text: j.state })),
              el("td", { data: { field: "attempts" }, text: ZB.num(j.attempts) }),
              el("td", { text: ZB.duration(jobSeconds(j)) }),
              el("td", { data: { field: "outcome" }, class: "mono" }, outcome),
              actions,
            );
          })
        : [ZB.emptyRow(8, "no jobs match")]),
    );
    ZB.showPager("jobs", state);
  }

  async function refresh(cluster, errors) {
    const brokers = ZB.servicesOf(cluster, "broker");
    const service = ZB.fillSelect($("broker-service"), brokers);
    $("broker-none").hidden = brokers.length !== 0;
    $("broker-content").hidden = brokers.length === 0;
    if (!service) return;
    const filter = `${service}|${$("jobs-state").value}|${$("jobs-queue").value}`;
    if (filter !== state.filter) Object.assign(state, { service, filter, cursors: [null], next: null });
    const [queues, history, workers, figures, jobs] = await Promise.allSettled([
      ZB.proxy(service, "api/v1/queues"),
      ZB.getJSON("/api/v1/history"),
      ZB.proxy(service, "api/v1/workers"),
      workerFigures(cluster),
      ZB.proxy(service, "api/v1/jobs", {
        state: $("jobs-state").value,
        queue: $("jobs-queue").value,
        limit: JOBS_PAGE,
        before: ZB.pageCursor(state),
      }),
    ]);
    const rates = history.status === "fulfilled" ? (history.value.queues || {})[service] || {} : {};
    if (queues.status === "fulfilled") renderQueues(queues.value.queues || [], rates);
    else errors.push(queues.reason.message);
    if (workers.status === "fulfilled") renderWorkers(workers.value.workers || [], figures.value || new Map());
    else errors.push(workers.reason.message);
    if (jobs.status === "fulfilled") renderJobs(jobs.value);
    else errors.push(jobs.reason.message);
  }

  async function submit(event) {
    event.preventDefault();
    let args;
    let kwargs;
    try {
      args = ZB.parseJSON($("submit-args").value, "args", []);
      kwargs = ZB.parseJSON($("submit-kwargs").value, "kwargs", {});
    } catch (err) {
      ZB.formError(err.message);
      return;
    }
    const body = {
      queue: $("submit-queue").value.trim() || "default",
      callable: $("submit-callable").value.trim(),
      path: $("submit-path").value.trim(),
      args,
      kwargs,
    };
    const delay = parseFloat($("submit-delay").value);
    if (isFinite(delay) && delay > 0) body.delay = delay;
    const retries = parseInt($("submit-retries").value, 10);
    if (isFinite(retries) && retries >= 0) body.retries = retries;
    const answer = await ZB.act(`submit ${body.callable || "(no callable)"} to ${body.queue}`, state.service, "api/v1/jobs", body);
    if (answer) $("action-status").textContent = `submitted job ${answer.id} to ${answer.queue} (${answer.state})`;
  }

  function init() {
    for (const id of ["broker-service", "jobs-state", "jobs-queue"]) $(id).addEventListener("change", ZB.refreshSoon);
    ZB.initPager("jobs", state);
    $("submit-form").addEventListener("submit", submit);
  }

  ZB.pages = ZB.pages || {};
  ZB.pages.broker = { refresh, init };
})();
