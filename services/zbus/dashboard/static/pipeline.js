// Pipeline: the sparkworker's session, its jobs (running ones with a progress bar,
// finished ones with duration, output path and a preview of the result), a form to run
// a registered job (submitted to the broker on the Spark queue), and cancel.
"use strict";

(() => {
  const ZB = window.ZB;
  const { $, el } = ZB;
  const state = { service: "", queue: "spark", broker: "" };

  function progressBar(job) {
    const p = job.progress || {};
    const tasks = p.tasks || {};
    // Spark counts the tasks of skipped stages (their data was already computed) as
    // never completed: a job that succeeded is done, whatever its task count says.
    const fraction = job.state === "succeeded" ? 1 : typeof p.fraction === "number" ? p.fraction : 0;
    const percent = Math.round(fraction * 100);
    const bar = el("progress", { class: `progress-${job.state}`, max: 100, value: percent, data: { fraction: String(fraction) } });
    return el(
      "td",
      { data: { field: "progress" } },
      bar,
      el("span", { class: "muted small-text", text: `${percent}% · ${ZB.num(tasks.completed)}/${ZB.num(tasks.total)} tasks · ${ZB.num(p.stages)} stages` }),
    );
  }

  function jobRow(job) {
    const actions = el("td");
    if (job.state === "running") {
      actions.append(
        el(
          "button",
          {
            type: "button",
            class: "small",
            data: { action: "cancel" },
            on: { click: () => ZB.act(`cancel Spark job ${job.job_id}`, state.service, `api/v1/spark/jobs/${encodeURIComponent(job.job_id)}/cancel`) },
          },
          "cancel",
        ),
      );
    }
    return el(
      "tr",
      { data: { sparkJob: job.job_id, state: job.state, job: job.job } },
      el("td", {}, el("strong", { text: job.job }), el("div", { class: "mono muted", text: job.job_id })),
      el("td", { data: { field: "state" } }, el("span", { class: `job job-${job.state}`, text: job.state })),
      progressBar(job),
      el("td", { data: { field: "seconds" }, text: ZB.duration(job.seconds) }),
      el("td", { data: { field: "output" }, class: "mono", text: job.output || "–" }),
      el(
        "td",
        { data: { field: "result" }, class: "mono" },
        job.error ? el("span", { class: "live-error", text: ZB.short(job.error, 300) }) : ZB.short(job.result_preview || "–", 300),
      ),
      actions,
    );
  }

  function renderSpark(spark) {
    state.queue = spark.queue || "spark";
    $("spark-stats").replaceChildren(
      ...[
        ["session", spark.up ? `up (${spark.master}, Spark ${spark.spark_version})` : `down${spark.error ? `: ${spark.error}` : ""}`, "session"],
        ["session uptime", ZB.duration(spark.session_uptime_seconds), "uptime"],
        ["queue", `${spark.queue} (concurrency ${spark.concurrency})`, "queue"],
        ["broker", `${spark.broker && spark.broker.connected ? "connected" : "not connected"} ${(spark.broker && spark.broker.endpoint) || ""}`, "broker"],
        ["jobs done / failed", `${ZB.num(spark.jobs_done)} / ${ZB.num(spark.jobs_failed)}`, "done"],
        ["output path", spark.output_path || "–", "output-path"],
      ].map(([name, value, key]) => el("div", {}, el("dt", { text: name }), el("dd", { data: { figure: key }, text: value }))),
    );
  }

  async function refresh(cluster, errors) {
    const sparks = ZB.servicesOf(cluster, "sparkworker");
    const service = ZB.fillSelect($("spark-service"), sparks);
    state.broker = ZB.servicesOf(cluster, "broker")[0] || "";
    $("spark-none").hidden = sparks.length !== 0;
    $("spark-content").hidden = sparks.length === 0;
    if (!service) return;
    state.service = service;
    const [spark, jobs] = await Promise.allSettled([ZB.proxy(service, "api/v1/spark"), ZB.proxy(service, "api/v1/spark/jobs")]);
    if (spark.status === "fulfilled") renderSpark(spark.value);
    else errors.push(spark.reason.message);
    if (jobs.status === "fulfilled") {
      const j = jobs.value;
      ZB.fillSelect($("run-job"), (j.registered || []).map((r) => r.name));
      const all = [...(j.running || []), ...(j.finished || [])];
      $("spark-jobs-body").replaceChildren(...(all.length ? all.map(jobRow) : [ZB.emptyRow(7, "no Spark jobs yet")]));
    } else errors.push(jobs.reason.message);
  }

  async function run(event) {
    event.preventDefault();
    let kwargs;
    try {
      kwargs = ZB.parseJSON($("run-params").value, "parameters", {});
    } catch (err) {
      ZB.formError(err.message);
      return;
    }
    const job = $("run-job").value;
    if (!state.broker) {
      ZB.formError("no broker is registered to submit the job to");
      return;
    }
    const answer = await ZB.act(`run ${job}`, state.broker, "api/v1/jobs", { queue: state.queue, callable: job, kwargs });
    if (answer) $("action-status").textContent = `submitted ${job} as job ${answer.id} on queue ${answer.queue}`;
  }

  function init() {
    $("spark-service").addEventListener("change", ZB.refreshSoon);
    $("run-form").addEventListener("submit", run);
  }

  ZB.pages = ZB.pages || {};
  ZB.pages.pipeline = { refresh, init };
})();
