// Line charts drawn as SVG from the catalog's history (no chart library): the last
// 15 minutes on the x axis, a rounded maximum on the y axis, a gap where nothing was
// measured. The <svg> carries data-points and data-last for whoever reads the page.
"use strict";

(() => {
  const ZB = window.ZB;
  const NS = "http://www.w3.org/2000/svg";
  const W = 480;
  const H = 150;
  const PAD = { left: 44, right: 10, top: 10, bottom: 22 };

  function svgEl(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 2.5, 5, 10]) {
      if (value <= step * power) return step * power;
    }
    return 10 * power;
  }

  function label(value) {
    if (value >= 1000) return `${(value / 1000).toLocaleString("en-US", { maximumFractionDigits: 1 })}k`;
    return value.toLocaleString("en-US", { maximumFractionDigits: 2 });
  }

  /**
   * Draw one series into `svg`.
   * @param {SVGElement} svg
   * @param {number[]} times Unix seconds
   * @param {(number|null)[]} values
   * @param {{window: number, now: number, unit: string}} opts
   */
  ZB.drawChart = function drawChart(svg, times, values, opts) {
    const now = opts.now;
    const start = now - opts.window;
    const measured = values.filter((v) => typeof v === "number");
    const top = niceMax(Math.max(0, ...measured));
    const x = (t) => PAD.left + ((t - start) / opts.window) * (W - PAD.left - PAD.right);
    const y = (v) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("role", "img");
    const parts = [];
    for (const frac of [0, 0.5, 1]) {
      const v = top * frac;
      parts.push(svgEl("line", { class: "grid", x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v) }));
      parts.push(svgEl("text", { class: "axis", x: PAD.left - 4, y: y(v) + 4, "text-anchor": "end" }, label(v)));
    }
    for (const minutes of [15, 10, 5, 0]) {
      const t = now - minutes * 60;
      parts.push(
        svgEl(
          "text",
          { class: "axis", x: x(t), y: H - 6, "text-anchor": minutes === 15 ? "start" : minutes === 0 ? "end" : "middle" },
          minutes ? `-${minutes} min` : "now",
        ),
      );
    }
    // One path per run of measured points; the area under it is shaded.
    let run = [];
    const runs = [];
    times.forEach((t, i) => {
      const v = values[i];
      if (typeof v === "number" && t >= start) run.push([x(t), y(v)]);
      else if (run.length) {
        runs.push(run);
        run = [];
      }
    });
    if (run.length) runs.push(run);
    for (const r of runs) {
      const line = r.map(([px, py], i) => `${i ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
      if (r.length > 1) {
        const base = y(0).toFixed(1);
        parts.push(svgEl("path", { class: "area", d: `${line}L${r[r.length - 1][0].toFixed(1)},${base}L${r[0][0].toFixed(1)},${base}Z` }));
      }
      parts.push(svgEl("path", { class: "line", d: line }));
      if (r.length === 1) parts.push(svgEl("circle", { class: "dot", cx: r[0][0], cy: r[0][1], r: 2.5 }));
    }
    const last = measured.length ? measured[measured.length - 1] : null;
    svg.replaceChildren(svgEl("title", {}, `${opts.title}: ${last === null ? "no data yet" : `${label(last)} ${opts.unit}`}`), ...parts);
    svg.dataset.points = String(measured.length);
    svg.dataset.last = last === null ? "" : String(last);
    return last;
  };
})();
