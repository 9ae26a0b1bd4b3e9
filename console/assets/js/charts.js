// Small SVG line charts for the overview: time on x (labelled in the browser's zone), values on
// y from zero, one or more series, gaps where a value is missing or samples are far apart.
// Drawn at the container's real width (redrawn when it changes), so text stays legible on a
// phone. Pointer and arrow keys move a cursor whose values are read out below the chart.

const SVG = "http://www.w3.org/2000/svg";
const HEIGHT = 170;
const MARGIN = { top: 10, right: 14, bottom: 24 };

const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const clockSeconds = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });

function svg(tag, attributes = {}, ...children) {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined && value !== false) element.setAttribute(key, String(value));
  }
  for (const child of children) if (child) element.append(child);
  return element;
}

function html(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined && value !== false) element.setAttribute(key, String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) element.append(child);
  return element;
}

/** A step of 1, 2, 2.5 or 5 times a power of ten, at least `raw`. */
function niceStep(raw) {
  if (!(raw > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 2.5, 5, 10]) if (factor * power >= raw) return factor * power;
  return 10 * power;
}

/** The y axis: from 0 to a round maximum at or above `max`, with about four ticks. */
export function yTicks(max, minimumMax = 1) {
  const top = Math.max(max, minimumMax);
  const step = niceStep(top / 4);
  const ticks = [];
  for (let value = 0; value < top + step * 0.999; value += step) ticks.push(Number(value.toPrecision(12)));
  return { max: ticks[ticks.length - 1], ticks };
}

/** Tick times on whole minutes (1, 2, 5, 10, 15, 30 or 60 apart), at most `count`. */
export function xTicks(from, to, count) {
  const minutes = [1, 2, 5, 10, 15, 30, 60, 120, 240];
  const span = to - from;
  const step = (minutes.find((m) => span / (m * 60_000) <= count) || 240) * 60_000;
  const ticks = [];
  for (let t = Math.ceil(from / step) * step; t <= to; t += step) ticks.push(t);
  return ticks;
}

/**
 * A chart. `series`: `[{name, value: sample => number|null, className, dashed}]`; `format(v)`
 * labels values; `minimumMax` keeps an idle chart's axis from collapsing to 0.
 * Returns `{element, update(samples, {windowSeconds, intervalSeconds}), destroy()}`.
 */
export function lineChart({ title, description, series, format = String, minimumMax = 1, axisFormat = format }) {
  const titleId = `chart-${Math.random().toString(36).slice(2, 9)}`;
  const hintId = `${titleId}-hint`;
  const surface = html("div", { class: "chart-surface", tabindex: "0", role: "img", "aria-describedby": hintId });
  // Read out only while the chart has focus (the arrow keys move the cursor): a live region that
  // every poll rewrites would have all charts speak every few seconds.
  const readout = html("p", { class: "chart-readout" });
  surface.addEventListener("focus", () => readout.setAttribute("aria-live", "polite"));
  const hint = html("p", { id: hintId, class: "visually-hidden" }, "Left and right arrow keys move through the samples; their values are read out below the chart.");
  const legend = html(
    "ul",
    { class: "chart-legend" },
    ...series.map((s) =>
      html("li", {}, html("span", { class: `swatch ${s.className}${s.dashed ? " dashed" : ""}`, "aria-hidden": "true" }), s.name),
    ),
  );
  const heading = html("h3", { id: titleId, class: "chart-title" }, title);
  const element = html(
    "figure",
    { class: "chart" },
    html("figcaption", {}, heading, series.length > 1 ? legend : null, description ? html("p", { class: "chart-description muted" }, description) : null),
    surface,
    readout,
    hint,
  );

  let samples = [];
  let windowMs = 15 * 60_000;
  let gapMs = 15_000;
  let cursor = null; // index into samples, or null for "latest"
  let width = 0;
  let geometry = null;

  function summary() {
    if (!samples.length) return "No samples yet.";
    return series
      .map((s) => {
        const values = samples.map(s.value).filter((v) => typeof v === "number");
        if (!values.length) return `${s.name}: no values`;
        return `${s.name} now ${format(lastValue(s))}, highest ${format(Math.max(...values))} over the last ${Math.round(windowMs / 60_000)} minutes`;
      })
      .join("; ");
  }

  function lastValue(s) {
    for (let i = samples.length - 1; i >= 0; i -= 1) {
      const v = s.value(samples[i]);
      if (typeof v === "number") return v;
    }
    return null;
  }

  function showReadout() {
    const index = cursor ?? samples.length - 1;
    const sample = samples[index];
    if (!sample) {
      readout.textContent = "No samples yet.";
      return;
    }
    const at = clockSeconds.format(new Date(sample.at));
    const values = series.map((s) => {
      const v = s.value(sample);
      return `${s.name} ${typeof v === "number" ? format(v) : "—"}`;
    });
    readout.textContent = `${cursor === null ? "Latest" : "At"} ${at}: ${values.join(", ")}`;
  }

  function draw() {
    width = surface.clientWidth;
    if (width <= 0) return;
    surface.setAttribute("aria-label", `${title}. ${summary()}`);
    const times = samples.map((s) => Date.parse(s.at));
    const to = times.length ? times[times.length - 1] : Date.now();
    const from = to - windowMs;
    let max = 0;
    for (const s of series) for (const sample of samples) {
      const v = s.value(sample);
      if (typeof v === "number" && v > max) max = v;
    }
    const y = yTicks(max, minimumMax);
    // The left margin fits the longest y label (11px text, about 6.6px a character).
    const labels = y.ticks.map((tick) => axisFormat(tick));
    const left = Math.max(28, Math.ceil(Math.max(...labels.map((text) => text.length)) * 6.6) + 10);
    const plotW = Math.max(10, width - left - MARGIN.right);
    const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
    const MARGIN_LEFT = left;
    const xOf = (t) => MARGIN_LEFT + ((t - from) / (to - from || 1)) * plotW;
    const yOf = (v) => MARGIN.top + plotH - (v / (y.max || 1)) * plotH;
    geometry = { xOf, yOf, times, from, to, plotW, plotH };

    const root = svg("svg", { width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, "aria-hidden": "true", focusable: "false" });
    const grid = svg("g", { class: "chart-grid" });
    y.ticks.forEach((tick, i) => {
      const yy = Math.round(yOf(tick)) + 0.5;
      grid.append(svg("line", { x1: MARGIN_LEFT, x2: MARGIN_LEFT + plotW, y1: yy, y2: yy }));
      grid.append(svg("text", { x: MARGIN_LEFT - 6, y: yy, "text-anchor": "end", "dominant-baseline": "middle", class: "chart-label" }, document.createTextNode(labels[i])));
    });
    for (const tick of xTicks(from, to, Math.max(2, Math.floor(plotW / 80)))) {
      const xx = Math.round(xOf(tick)) + 0.5;
      const text = clock.format(new Date(tick));
      const half = (text.length * 6.2) / 2;
      // Labels near an edge are anchored inside the chart rather than cut off.
      const anchor = xx + half > width ? "end" : xx - half < 0 ? "start" : "middle";
      const tx = anchor === "end" ? width - 1 : anchor === "start" ? 1 : xx;
      grid.append(svg("line", { x1: xx, x2: xx, y1: MARGIN.top, y2: MARGIN.top + plotH, class: "chart-vgrid" }));
      grid.append(svg("text", { x: tx, y: HEIGHT - 6, "text-anchor": anchor, class: "chart-label" }, document.createTextNode(text)));
    }
    root.append(grid);

    for (const s of series) {
      // Runs of neighbouring samples with values; a gap or a missing value starts a new one.
      const runs = [];
      let run = null;
      samples.forEach((sample, i) => {
        const v = s.value(sample);
        const t = times[i];
        const far = i > 0 && t - times[i - 1] > gapMs;
        if (typeof v !== "number" || t < from) {
          run = null;
          return;
        }
        if (!run || far) runs.push((run = []));
        run.push([xOf(t), yOf(v)]);
      });
      const d = runs.map((points) => points.map(([x, yy], i) => `${i ? "L" : "M"}${x.toFixed(1)},${yy.toFixed(1)}`).join("")).join("");
      if (d) root.append(svg("path", { d, class: `chart-line ${s.className}${s.dashed ? " dashed" : ""}` }));
      // A run of one sample (a latency from the only interval with calls) has no line: a dot shows it.
      for (const points of runs) {
        if (points.length === 1) root.append(svg("circle", { cx: points[0][0], cy: points[0][1], r: 2.5, class: `chart-dot ${s.className}` }));
      }
    }

    if (cursor !== null && samples[cursor]) {
      const xx = xOf(times[cursor]);
      const g = svg("g", { class: "chart-cursor" }, svg("line", { x1: xx, x2: xx, y1: MARGIN.top, y2: MARGIN.top + plotH }));
      for (const s of series) {
        const v = s.value(samples[cursor]);
        if (typeof v === "number") g.append(svg("circle", { cx: xx, cy: yOf(v), r: 3.5, class: `chart-dot ${s.className}` }));
      }
      root.append(g);
    }
    root.append(svg("line", { x1: MARGIN_LEFT, x2: MARGIN_LEFT + plotW, y1: MARGIN.top + plotH + 0.5, y2: MARGIN.top + plotH + 0.5, class: "chart-axis" }));
    surface.replaceChildren(root);
    showReadout();
  }

  function nearest(clientX) {
    if (!geometry || !samples.length) return null;
    const box = surface.getBoundingClientRect();
    const x = clientX - box.left;
    let best = null;
    let distance = Infinity;
    geometry.times.forEach((t, i) => {
      if (t < geometry.from) return;
      const d = Math.abs(geometry.xOf(t) - x);
      if (d < distance) {
        distance = d;
        best = i;
      }
    });
    return best;
  }

  surface.addEventListener("pointermove", (event) => {
    const index = nearest(event.clientX);
    if (index !== cursor) {
      cursor = index;
      draw();
    }
  });
  surface.addEventListener("pointerleave", () => {
    cursor = null;
    draw();
  });
  surface.addEventListener("keydown", (event) => {
    if (!samples.length) return;
    const last = samples.length - 1;
    const current = cursor ?? last;
    const moves = { ArrowLeft: current - 1, ArrowRight: current + 1, Home: 0, End: last };
    if (event.key === "Escape") {
      cursor = null;
    } else if (event.key in moves) {
      cursor = Math.max(0, Math.min(last, moves[event.key]));
    } else {
      return;
    }
    event.preventDefault();
    draw();
  });
  surface.addEventListener("blur", () => {
    readout.removeAttribute("aria-live");
    if (cursor !== null) {
      cursor = null;
      draw();
    }
  });

  const observer = new ResizeObserver(() => {
    if (surface.clientWidth !== width) draw();
  });
  observer.observe(surface);

  return {
    element,
    update(next, { windowSeconds, intervalSeconds } = {}) {
      samples = next || [];
      if (windowSeconds) windowMs = windowSeconds * 1000;
      if (intervalSeconds) gapMs = intervalSeconds * 1000 * 2.5;
      if (cursor !== null && cursor >= samples.length) cursor = null;
      draw();
    },
    destroy() {
      observer.disconnect();
    },
  };
}
