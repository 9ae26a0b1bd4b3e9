// A generation's progress, live: the server's event stream says when the stage changes, and each
// event re-reads the server for the generation's details (timings, tokens, model, warnings,
// error). Opened after the generation finished, it shows how it went. A screen reader hears
// each stage change.

import * as api from "../api.js";
import { badge, durationMs, errorBox, h, heading, jsonBlock, localTime, number, replace, time } from "../dom.js";

const RUNNING = ["pending", "fetching", "planning", "compiling", "testing"];
const FINAL = ["ready", "planned", "failed", "awaiting_approval", "rejected"];

/** The stages in order: status, name, what happens (for prompt and for API-description servers). */
const STAGES = [
  { status: "pending", name: "Queued", prompt: "Waiting for a free generation slot.", openapi: "Waiting for a free generation slot." },
  { status: "fetching", name: "Fetching", prompt: "Reading the documents the prompt links to.", openapi: "Reading the API description." },
  { status: "planning", name: "Planning", prompt: "The LLM chooses the tools and their schemas.", openapi: "Choosing the operations that become tools." },
  { status: "compiling", name: "Writing handlers", prompt: "The LLM writes and compiles a handler for each tool.", openapi: "Not needed: requests come from the description." },
  { status: "testing", name: "Self-testing", prompt: "Each read-only tool is called once with example arguments.", openapi: "Each read-only tool is called once with example arguments." },
];

const FINAL_TEXT = {
  ready: "Ready: the tools are served",
  planned: "Planned: the plan is stored, nothing is served (dry run)",
  failed: "Failed: the error says why",
  awaiting_approval: "Awaiting approval: the tools wait for an operator",
  rejected: "Rejected: this version is never served",
};

const STATE_TEXT = {
  done: "Done",
  current: "In progress",
  pending: "Waiting",
  failed: "Failed",
  skipped: "Skipped",
  "not-run": "Not run",
};

export async function render(main, params) {
  const id = params.id;
  const generationId = Number(params.generation);
  if (!Number.isSafeInteger(generationId) || generationId < 0) {
    main.append(
      h("a", { class: "back-link", href: `#/servers/${encodeURIComponent(id)}` }, `← Server ${id}`),
      heading("Generation"),
      errorBox({ message: `“${params.generation}” is not a generation id; generation ids are numbers.` }),
    );
    return;
  }
  const controller = new AbortController();
  const { signal } = controller;

  let server = null;
  let generation = null;
  let liveStatus = null;
  let liveError = null;
  let shownStatus = null;
  let newer = null;
  const seenAt = {}; // status → when this page saw it begin (ms)
  const observed = {}; // status → how long this page saw it run (ms), until the stored timings come
  let ticker = null;
  let streamNote = null;

  const announcer = h("p", { class: "visually-hidden", "aria-live": "polite", "aria-atomic": "true", id: "progress-announcer" });
  const title = h("div", { class: "progress-head" });
  const summary = h("div", { class: "progress-summary" });
  const stepper = h("ol", { class: "stepper", "aria-label": "Generation stages" });
  const outcome = h("div", { class: "progress-outcome" });
  const facts = h("div", { class: "progress-facts" });
  const notes = h("div", { class: "progress-notes" });

  main.append(
    h("a", { class: "back-link", href: `#/servers/${encodeURIComponent(id)}` }, `← Server ${id}`),
    title,
    announcer,
    notes,
    h("div", { class: "progress-layout" }, h("section", { class: "card progress-stages", "aria-labelledby": "stages-heading" }, h("h2", { id: "stages-heading" }, "Stages"), summary, stepper), facts),
    outcome,
  );

  // Loading: the server, then this generation (the latest, the served one, or an older version).
  async function load() {
    const record = await api.get(api.path`/admin/servers/${id}`, { signal });
    let found = [record.latest_generation, record.generation].find((g) => g && g.id === generationId) || null;
    if (!found) {
      const { versions } = await api.get(api.path`/admin/servers/${id}/versions`, { signal });
      const version = versions.find((v) => v.generation_id === generationId);
      if (version) found = await api.get(api.path`/admin/servers/${id}/versions/${version.version}`, { signal });
    }
    server = record;
    generation = found;
    const latest = record.latest_generation || record.generation;
    newer = latest && latest.id > generationId ? latest : null;
  }

  // One re-read at a time; events that arrive meanwhile ask for one more.
  let loading = null;
  let again = false;
  async function refresh() {
    if (loading) {
      again = true;
      return loading;
    }
    loading = (async () => {
      do {
        again = false;
        await load();
        draw();
      } while (again && !signal.aborted);
    })();
    try {
      await loading;
    } finally {
      loading = null;
    }
  }

  function status() {
    if (!generation) return liveStatus;
    const stored = generation.status;
    if (liveStatus && RUNNING.includes(stored) && order(liveStatus) > order(stored)) return liveStatus;
    return stored;
  }

  function draw() {
    if (!generation) {
      document.title = `Generation ${generationId} · mcpbootd console`;
      replace(
        title,
        heading(`Generation ${generationId}`),
      );
      replace(
        notes,
        errorBox(
          { message: `Server ${server ? server.name : id} has no generation ${generationId}; it may have been pruned.` },
          "The server page lists its versions.",
        ),
      );
      stepper.closest(".progress-layout").hidden = true;
      return;
    }
    const current = status();
    if (current !== shownStatus) {
      // Stage clocks start at changes this page saw, not at the status it found on opening.
      if (shownStatus !== null) {
        const now = Date.now();
        if (!(current in seenAt)) seenAt[current] = now;
        if (seenAt[shownStatus] && !(shownStatus in observed)) observed[shownStatus] = now - seenAt[shownStatus];
        announcer.textContent = announcement(current);
      }
      shownStatus = current;
    }
    const final = FINAL.includes(current);
    replace(
      title,
      heading(
        `Generation of ${server.name}`,
        badge(current),
      ),
      h(
        "p",
        { class: "muted progress-sub" },
        `Version ${generation.version} · generation ${generation.id} · ${triggerText(generation.triggered_by)} · started `,
        time(generation.created_at, { withAbsolute: true }),
      ),
    );
    drawNotes();
    replace(
      stepper,
      steps(generation, current).map((step) => stepItem(step, final ? undefined : observed[step.status])),
    );
    drawSummary();
    replace(facts, factsCard(server, generation));
    replace(outcome, final ? outcomeCard(server, generation, current) : null);
    if (final) {
      clearInterval(ticker);
      ticker = null;
    } else if (!ticker) {
      // The clock moves every second; the stored status is read every two as well, so the page
      // keeps up even when an event comes late.
      let ticks = 0;
      ticker = setInterval(() => {
        drawSummary();
        ticks += 1;
        if (ticks % 2 === 0 && !loading) refresh().catch(showError);
      }, 1000);
    }
  }

  function drawSummary() {
    if (!generation) return;
    const current = status();
    if (FINAL.includes(current)) {
      const total = generation.timings && generation.timings.total_ms;
      replace(
        summary,
        h("p", { class: "progress-status" }, h("strong", {}, FINAL_TEXT[current] || current), total !== undefined ? ` · took ${durationMs(total)}` : null),
      );
      return;
    }
    const started = Date.parse(generation.created_at);
    const stage = STAGES.find((s) => s.status === current);
    replace(
      summary,
      h(
        "p",
        { class: "progress-status" },
        h("span", { class: "spinner", "aria-hidden": "true" }),
        h("strong", {}, stage ? `${stage.name}…` : `${current}…`),
        Number.isFinite(started) ? ` · running for ${seconds(Date.now() - started)}` : null,
      ),
    );
    // The current stage's own clock, when this page saw it begin.
    const since = seenAt[current];
    const cell = stepper.querySelector('[aria-current="step"] .step-time');
    if (cell && since) cell.textContent = `for ${seconds(Date.now() - since)}`;
  }

  function drawNotes() {
    const parts = [];
    if (newer) {
      parts.push(
        h(
          "p",
          { class: "notice" },
          `A newer generation (${newer.id}, version ${newer.version}) is ${String(newer.status).replace(/_/g, " ")}. `,
          h("a", { href: `#/servers/${encodeURIComponent(id)}/progress/${newer.id}` }, "Follow it"),
        ),
      );
    }
    if (streamNote) parts.push(streamNote);
    replace(notes, parts);
  }

  function announcement(current) {
    const error = (generation && generation.error) || liveError;
    if (current === "failed") return `Generation failed${error ? `: ${error}` : ""}.`;
    if (FINAL.includes(current)) return `Generation finished. ${FINAL_TEXT[current] || current}.`;
    const stage = STAGES.find((s) => s.status === current);
    return `${stage ? stage.name : current} started.`;
  }

  // Following the stream until this generation is final; a broken stream is opened again.
  async function follow() {
    while (!signal.aborted) {
      try {
        await api.events(
          api.path`/admin/servers/${id}/events`,
          (name, data) => {
            if (!data || typeof data !== "object") return;
            if (data.generation_id === generationId) {
              liveStatus = data.status;
              if (data.error) liveError = data.error;
            }
            if (streamNote) {
              streamNote = null;
              drawNotes();
            }
            // A stage change shows at once; a final one waits for the re-read (its timings, error).
            if (generation && !FINAL.includes(liveStatus)) draw();
            refresh().catch(showError);
          },
          signal,
        );
      } catch (error) {
        if (signal.aborted) return;
        streamNote = errorBox(error, "Live updates are interrupted; trying again in a few seconds.");
        drawNotes();
      }
      if (signal.aborted) return;
      // The stream ends after `done` (or when the daemon stops): re-read, and stop once final.
      await refresh().catch(showError);
      if (generation && FINAL.includes(generation.status)) return;
      await sleep(3000, signal);
    }
  }

  function showError(error) {
    if (error.name === "AbortError") return;
    streamNote = errorBox(error);
    drawNotes();
  }

  try {
    await refresh();
  } catch (error) {
    if (error.name === "AbortError") throw error;
    replace(main, h("a", { class: "back-link", href: "#/servers" }, "← Servers"), heading(`Generation ${generationId}`), errorBox(error, error.status === 404 ? "The servers list shows what is registered." : null));
    return;
  }
  if (generation && !FINAL.includes(generation.status)) follow();

  return () => {
    controller.abort();
    clearInterval(ticker);
  };
}

function order(status) {
  const index = RUNNING.indexOf(status);
  return index >= 0 ? index : RUNNING.length;
}

function triggerText(trigger) {
  return (
    {
      registration: "from the registration",
      regenerate: "regenerated",
      drift: "after documentation drift",
      repair: "repair of some tools",
    }[trigger] || trigger
  );
}

/**
 * Each stage's state: done, current, pending, failed, skipped or not-run, with its time and a
 * note, from the generation and its current status.
 */
export function steps(generation, current) {
  const timings = generation.timings || {};
  const source = generation.source === "openapi" ? "openapi" : "prompt";
  const final = FINAL.includes(current);
  let failedAt = null;
  if (current === "failed") {
    const match = /^(\w+) failed:/.exec(generation.error || "");
    failedAt = match && STAGES.some((s) => s.status === match[1]) ? match[1] : null;
    if (!failedAt) {
      // The stage after the last one that took time.
      const timed = STAGES.filter((s) => timings[`${s.status}_ms`] !== undefined).map((s) => s.status);
      const last = timed.length ? STAGES.findIndex((s) => s.status === timed[timed.length - 1]) : 0;
      failedAt = STAGES[Math.min(last + 1, STAGES.length - 1)].status;
    }
  }
  const failedIndex = failedAt ? STAGES.findIndex((s) => s.status === failedAt) : -1;
  const list = STAGES.map((stage, index) => {
    const ms = timings[`${stage.status}_ms`];
    let state;
    let note = null;
    if (!final) {
      const at = order(current);
      if (index < at) state = stage.status === "compiling" && source === "openapi" ? "skipped" : "done";
      else if (index === at) state = "current";
      else state = stage.status === "compiling" && source === "openapi" ? "skipped" : "pending";
    } else if (current === "failed") {
      if (index < failedIndex) state = ms !== undefined || stage.status === "pending" ? "done" : "skipped";
      else if (index === failedIndex) state = "failed";
      else state = "not-run";
    } else if (stage.status === "pending") {
      state = "done";
    } else if (ms !== undefined) {
      state = "done";
    } else if (current === "planned" && (stage.status === "compiling" || stage.status === "testing")) {
      state = "not-run";
      note = "Dry run: stopped after planning.";
    } else {
      state = "skipped";
      if (generation.cache_hit) note = `Reused from generation ${generation.cached_from ?? "?"} (cache hit).`;
      else if (source === "openapi" && stage.status === "compiling") note = null;
      else if (generation.triggered_by === "repair" && (stage.status === "fetching" || stage.status === "planning")) note = "A repair keeps the plan and rewrites only some handlers.";
    }
    return { ...stage, description: stage[source], state, ms, note };
  });
  list.push({
    status: "final",
    name: final ? (FINAL_TEXT[current] || current).split(":")[0] : "Finished",
    description: final ? finalDescription(current) : "Ready, planned, awaiting approval or failed.",
    state: final ? (current === "failed" || current === "rejected" ? "failed" : "done") : "pending",
    ms: final ? timings.total_ms : undefined,
    total: true,
  });
  return list;
}

function finalDescription(status) {
  const text = FINAL_TEXT[status] || status;
  const colon = text.indexOf(": ");
  return colon >= 0 ? `${text.slice(colon + 2)[0].toUpperCase()}${text.slice(colon + 3)}.` : "";
}

function stepItem(step, observedMs) {
  let timeText = "";
  if (step.ms !== undefined) timeText = step.total ? `total ${durationMs(step.ms)}` : durationMs(step.ms);
  else if (observedMs !== undefined && step.state === "done") timeText = `about ${seconds(observedMs)}`;
  return h(
    "li",
    { class: `step step-${step.state}`, "data-stage": step.status, "aria-current": step.state === "current" ? "step" : null },
    h("span", { class: "step-marker", "aria-hidden": "true" }, marker(step.state)),
    h(
      "div",
      { class: "step-body" },
      h("div", { class: "step-line" }, h("span", { class: "step-name" }, step.name), h("span", { class: "step-state" }, STATE_TEXT[step.state]), h("span", { class: "step-time" }, timeText)),
      h("p", { class: "step-description muted" }, step.note || step.description),
    ),
  );
}

function marker(state) {
  return { done: "✓", current: "", pending: "", failed: "✕", skipped: "–", "not-run": "–" }[state] || "";
}

function factsCard(server, g) {
  const tokens = g.tokens || {};
  const finished = FINAL.includes(g.status);
  const rows = [
    ["Server", h("a", { href: `#/servers/${encodeURIComponent(server.id)}` }, server.name), " ", h("code", {}, server.id)],
    ["Version", String(g.version)],
    ["Source", { llm: "Prompt (LLM)", openapi: "OpenAPI document", toolset: "Toolset" }[g.source] || g.source],
    ["Model", g.model ? h("code", {}, g.model) : h("span", { class: "muted" }, finished ? "—" : "known when it finishes")],
    ["Cache hit", g.cache_hit ? `yes, from generation ${g.cached_from ?? "?"}` : finished ? "no" : h("span", { class: "muted" }, "—")],
    [
      "Tokens",
      tokens.requests
        ? `${number.format(tokens.input)} in · ${number.format(tokens.output)} out · ${number.format(tokens.requests)} ${tokens.requests === 1 ? "request" : "requests"}`
        : h("span", { class: "muted" }, finished ? "none" : "counted when it finishes"),
    ],
    ["Options", [g.dry_run ? "dry run" : null, g.force ? "cache skipped (force)" : null].filter(Boolean).join(", ") || "—"],
    ["Started", time(g.created_at), h("span", { class: "muted" }, ` ${localTime(g.created_at)}`)],
    ["Finished", g.finished_at ? [time(g.finished_at), h("span", { class: "muted" }, ` ${localTime(g.finished_at)}`)] : h("span", { class: "muted" }, "not yet")],
  ];
  return h(
    "section",
    { class: "card", "aria-labelledby": "details-heading" },
    h("h2", { id: "details-heading" }, "Details"),
    h(
      "dl",
      { class: "facts" },
      rows.map(([term, ...value]) => [h("dt", {}, term), h("dd", {}, value)]),
    ),
  );
}

function outcomeCard(server, g, current) {
  const base = `#/servers/${encodeURIComponent(server.id)}`;
  const parts = [];
  if (current === "failed") {
    parts.push(errorBox({ message: g.error || "The generation failed." }, "Change the prompt or the registration and regenerate from the server page; the daemon log has more."));
  }
  if ((g.warnings || []).length) {
    parts.push(
      h(
        "section",
        { class: "card warnings", "aria-labelledby": "warnings-heading" },
        h("h2", { id: "warnings-heading" }, `Warnings (${g.warnings.length})`),
        capped(g.warnings, 5, warningItem, (n) => `${n} more ${n === 1 ? "warning" : "warnings"}`),
      ),
    );
  }
  if ((g.refused_domains || []).length) {
    parts.push(
      h(
        "section",
        { class: "card", "aria-labelledby": "refused-heading" },
        h("h2", { id: "refused-heading" }, "Domains not admitted to the whitelist"),
        h(
          "ul",
          {},
          g.refused_domains.map((refused) => h("li", {}, h("code", {}, refused.domain || JSON.stringify(refused)), refused.reason ? ` — ${refused.reason}` : "")),
        ),
      ),
    );
  }
  const tools = g.tools || [];
  const planned = (g.plan && Array.isArray(g.plan.tools) && g.plan.tools) || [];
  const actions = [h("a", { class: "button primary", href: base }, "Open the server")];
  if (current === "ready" && tools.length) actions.push(h("a", { class: "button", href: `${base}/tools` }, "Tools"));
  if (current === "awaiting_approval") actions.push(h("a", { class: "button", href: `${base}/versions` }, "Review the version"));
  actions.push(h("a", { class: "button", href: `${base}/calls` }, "Call log"));
  const next = h(
    "section",
    { class: "card", "aria-labelledby": "next-heading" },
    h("h2", { id: "next-heading" }, current === "failed" ? "What now" : "Result"),
    tools.length
      ? [
          h("p", {}, `${tools.length} ${tools.length === 1 ? "tool" : "tools"}${current === "ready" ? `, served at ` : ""}`, current === "ready" ? h("code", {}, server.mcp_path) : null, ":"),
          capped(
            tools,
            12,
            (tool) =>
              h(
                "li",
                {},
                h("a", { href: `${base}/tools/${encodeURIComponent(tool.name)}` }, tool.name),
                tool.self_test && tool.self_test.status ? [" ", badge(`self-test ${tool.self_test.status}`, selfTestKind(tool.self_test.status))] : null,
                tool.description ? h("span", { class: "muted" }, ` — ${firstLine(tool.description)}`) : null,
              ),
            (n) => `${n} more ${n === 1 ? "tool" : "tools"}`,
            "tool-links",
          ),
        ]
      : planned.length
        ? [
            h("p", {}, `The plan has ${planned.length} ${planned.length === 1 ? "tool" : "tools"}: `, planned.map((tool, i) => [i ? ", " : "", h("code", {}, tool.name)])),
            lazyJson("The plan as JSON", g.plan),
          ]
        : null,
    h("div", { class: "actions" }, actions),
  );
  parts.push(next);
  return parts;
}

/** A warning; a very long one (a list of every operation left out) is cut, with the rest on demand. */
function warningItem(text) {
  if (text.length <= 400) return h("li", {}, text);
  return h("li", {}, `${text.slice(0, 300)}…`, h("details", { class: "more" }, h("summary", {}, "The whole warning"), h("p", {}, text)));
}

/** A list showing its first `n` items, the rest behind a disclosure. */
function capped(items, n, item, more, listClass = null) {
  const list = h("ul", { class: listClass }, items.slice(0, n).map(item));
  if (items.length <= n) return list;
  return [list, h("details", { class: "more" }, h("summary", {}, more(items.length - n)), h("ul", { class: listClass }, items.slice(n).map(item)))];
}

function firstLine(text) {
  const line = String(text).split("\n")[0];
  return line.length > 160 ? `${line.slice(0, 159)}…` : line;
}

function selfTestKind(status) {
  return { passed: "ok", failed: "failed", skipped: "info" }[status] || "info";
}

// The plan can be long: it is built when its details open.
function lazyJson(summary, value) {
  const details = h("details", { class: "plan" }, h("summary", {}, summary));
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) details.append(jsonBlock(value));
  });
  return details;
}

function seconds(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      resolve();
    });
  });
}
