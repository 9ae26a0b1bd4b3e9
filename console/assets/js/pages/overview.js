// The daemon at a glance: current call rate, errors, latency, isolate pool load and memory as
// big numbers, and their last minutes as line charts, from `GET /admin/overview` every 5 s.

import * as api from "../api.js";
import { lineChart } from "../charts.js";
import { bytes, durationMs, errorBox, h, heading, number, replace, time } from "../dom.js";

const POLL_MS = 5000;

const rate = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
// Axis labels: ticks fall on steps such as 0.25, which one decimal would show as 0.3.
const compact = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

function perSecond(value) {
  return `${rate.format(value)}/s`;
}

function ms(value) {
  if (value === 0) return "0";
  return value >= 1000 ? `${compact.format(value / 1000)} s` : `${compact.format(value)} ms`;
}

const MB = 1024 * 1024;

function megabytes(value) {
  return value === 0 ? "0" : `${compact.format(value)} MB`;
}

function mb(value) {
  return typeof value === "number" ? value / MB : null;
}

export async function render(main) {
  const controller = new AbortController();
  let timer = null;
  let loadedOnce = false;
  let shownError = "";

  const charts = [
    lineChart({
      title: "Calls per second",
      series: [{ name: "Calls", value: (s) => s.calls_per_second, className: "series-calls" }],
      format: perSecond,
      axisFormat: (v) => rate.format(v),
    }),
    lineChart({
      title: "Errors per second",
      description: "Calls whose outcome was not ok.",
      series: [{ name: "Errors", value: (s) => s.errors_per_second, className: "series-errors" }],
      format: perSecond,
      axisFormat: (v) => rate.format(v),
    }),
    lineChart({
      title: "Latency",
      series: [
        { name: "p50", value: (s) => s.p50_ms, className: "series-p50" },
        { name: "p99", value: (s) => s.p99_ms, className: "series-p99" },
      ],
      format: (v) => durationMs(v),
      axisFormat: ms,
      minimumMax: 1,
    }),
    lineChart({
      title: "Isolate pool",
      series: [
        { name: "Busy workers", value: (s) => s.busy_workers, className: "series-busy" },
        { name: "Workers", value: (s) => s.workers, className: "series-workers", dashed: true },
        { name: "Queued calls", value: (s) => s.queue_depth, className: "series-queue" },
      ],
      format: (v) => number.format(v),
      axisFormat: (v) => number.format(v),
      minimumMax: 1,
    }),
    lineChart({
      title: "Memory",
      description: "Isolate memory in use against the pool's budget.",
      series: [
        { name: "In use", value: (s) => mb(s.memory_bytes), className: "series-memory" },
        { name: "Budget", value: (s) => mb(s.memory_budget_bytes), className: "series-budget", dashed: true },
      ],
      // Plotted in MB, so the axis has round numbers.
      format: (v) => bytes(Math.round(v * MB)),
      axisFormat: megabytes,
      minimumMax: 1,
    }),
  ];

  const updated = h("p", { class: "muted overview-updated" });
  const status = h("div", { class: "overview-status" });
  const tiles = h("div", { class: "stat-grid", role: "list", "aria-label": "Current values" });
  const chartGrid = h("div", { class: "chart-grid-layout" }, charts.map((chart) => h("div", { class: "card chart-card" }, chart.element)));
  const body = h("div", { class: "overview-body", hidden: true }, tiles, h("h2", {}, "Over the last minutes"), chartGrid);

  main.append(heading("Overview"), updated, status, body);

  function draw(overview) {
    const samples = overview.samples || [];
    const latest = samples[samples.length - 1] || null;
    const minutes = Math.round((overview.window_seconds || 900) / 60);
    replace(
      updated,
      latest ? ["Latest sample: ", time(latest.at), `. One every ${overview.interval_seconds || 5} s over the last ${minutes} minutes, refreshed every ${POLL_MS / 1000} s.`] : "No samples yet: the first arrives within a few seconds of the daemon starting.",
      overview.replica ? [" Replica ", h("code", {}, overview.replica), "."] : null,
    );
    const hadFocus = tiles.contains(document.activeElement);
    replace(tiles, tileList(overview, latest));
    if (hadFocus) tiles.querySelector("a")?.focus({ preventScroll: true });
    for (const chart of charts) chart.update(samples, { windowSeconds: overview.window_seconds, intervalSeconds: overview.interval_seconds });
    body.hidden = false;
  }

  async function poll() {
    try {
      const overview = await api.get("/admin/overview", { signal: controller.signal });
      status.replaceChildren();
      shownError = "";
      loadedOnce = true;
      draw(overview);
    } catch (error) {
      if (error.name === "AbortError") return;
      const hint =
        error.status === 404
          ? "This daemon does not serve GET /admin/overview yet; a newer build does. The page keeps trying."
          : loadedOnce
            ? "The values below are from the last successful refresh."
            : null;
      // The same failure again is not announced again.
      if (error.message !== shownError) replace(status, errorBox(error, hint));
      shownError = error.message;
    }
    if (!controller.signal.aborted) timer = setTimeout(poll, POLL_MS);
  }

  await poll();
  return () => {
    controller.abort();
    clearTimeout(timer);
    for (const chart of charts) chart.destroy();
  };
}

function tileList(overview, s) {
  // A new node each time: one node appended to several tiles would show in the last one only.
  const missing = () => h("span", { class: "muted" }, "—");
  const value = (v, format) => (typeof v === "number" ? format(v) : missing());
  const errorShare = s && s.calls_per_second > 0 ? s.errors_per_second / s.calls_per_second : null;
  const memoryShare = s && s.memory_budget_bytes > 0 ? s.memory_bytes / s.memory_budget_bytes : null;
  const poolShare = s && s.workers > 0 ? s.busy_workers / s.workers : null;
  return [
    tile("Calls", s ? value(s.calls_per_second, rate.format) : missing(), "per second"),
    tile(
      "Errors",
      s ? value(s.errors_per_second, rate.format) : missing(),
      errorShare !== null ? `per second · ${Math.round(errorShare * 100)}% of calls` : "per second",
      s && s.errors_per_second > 0 ? "bad" : null,
    ),
    tile("Latency p50", s ? value(s.p50_ms, durationMs) : missing(), s && s.p50_ms === null ? "no calls in the interval" : "median call"),
    tile("Latency p99", s ? value(s.p99_ms, durationMs) : missing(), s && s.p99_ms === null ? "no calls in the interval" : "slowest 1%"),
    tile("In flight", s ? value(s.in_flight_calls, number.format) : missing(), "calls running now"),
    tile("Queue", s ? value(s.queue_depth, number.format) : missing(), "calls waiting for a worker", s && s.queue_depth > 0 ? "warn" : null),
    tile(
      "Workers busy",
      s ? [value(s.busy_workers, number.format), h("span", { class: "stat-of" }, ` / ${typeof s.workers === "number" ? number.format(s.workers) : "—"}`)] : missing(),
      poolShare !== null ? meter(poolShare, "Isolate pool load") : "isolate pool",
    ),
    tile(
      "Memory",
      s ? value(s.memory_bytes, bytes) : missing(),
      memoryShare !== null ? [meter(memoryShare, "Memory used of the budget"), ` of ${bytes(s.memory_budget_bytes)}`] : "isolate memory",
      memoryShare !== null && memoryShare > 0.9 ? "warn" : null,
    ),
    tile("Servers", typeof overview.mounted_servers === "number" ? h("a", { href: "#/servers" }, number.format(overview.mounted_servers)) : missing(), "mounted"),
  ];
}

function tile(label, big, note, tone = null) {
  return h(
    "div",
    { class: `stat${tone ? ` stat-${tone}` : ""}`, role: "listitem" },
    h("span", { class: "stat-label" }, label),
    h("span", { class: "stat-value" }, big),
    note ? h("span", { class: "stat-note muted" }, note) : null,
  );
}

function meter(share, label) {
  const clamped = Math.max(0, Math.min(1, share));
  const element = h("meter", { min: 0, max: 1, low: 0.7, high: 0.9, optimum: 0, value: clamped, "aria-label": label, title: `${Math.round(clamped * 100)}%` });
  return [element, ` ${Math.round(clamped * 100)}%`];
}
