// A server's call log, newest first: filters (tool, outcome, time range, how many, one call by
// its execution id) kept in the address so a link reproduces the view, and each call expandable
// to its outbound requests, console output, error, its caller (a call made with an OAuth token),
// and for a code-mode script its code and the tool calls it made.

import * as api from "../api.js";
import { badge, bytes, code, durationUs, emptyState, errorBox, h, heading, localTime, number, replace, time } from "../dom.js";

const OUTCOMES = [
  ["ok", "ok"],
  ["error", "error"],
  ["denied", "denied (egress policy)"],
  ["timeout", "timeout"],
  ["limit", "over a limit"],
  ["busy", "busy (refused at admission)"],
  ["shutting_down", "shutting down"],
  ["cancelled", "cancelled"],
];

const RANGES = [
  ["", "Any time"],
  ["15m", "Last 15 minutes", 15 * 60_000],
  ["1h", "Last hour", 3_600_000],
  ["24h", "Last 24 hours", 86_400_000],
  ["7d", "Last 7 days", 7 * 86_400_000],
  ["custom", "Between…"],
];

const DEFAULT_LIMIT = 50;
const FILTER_KEYS = ["tool", "outcome", "range", "since", "until", "limit", "execution_id"];

export async function render(main, params, query) {
  const id = params.id;
  const controller = new AbortController();
  const { signal } = controller;
  const base = `#/servers/${encodeURIComponent(id)}`;
  let filters = readFilters(query);
  let loadTicket = 0;

  const server = await api.get(api.path`/admin/servers/${id}`, { signal }).catch((error) => {
    if (error.name === "AbortError") throw error;
    replace(
      main,
      h("a", { class: "back-link", href: "#/servers" }, "← Servers"),
      heading(`Call log of ${id}`),
      errorBox(error, error.status === 404 ? "The servers list shows what is registered." : null),
    );
    return null;
  });
  if (!server) return;

  // Filters.
  const toolNames = (server.tools || []).map((tool) => tool.name);
  if (server.code_mode && server.code_mode.enabled && !toolNames.includes("code_execution")) toolNames.push("code_execution");
  if (filters.tool && !toolNames.includes(filters.tool)) toolNames.push(filters.tool);

  const controls = {
    tool: h("select", { id: "calls-tool", name: "tool" }, h("option", { value: "" }, "All tools"), toolNames.map((name) => h("option", { value: name }, name))),
    outcome: h("select", { id: "calls-outcome", name: "outcome" }, h("option", { value: "" }, "Any outcome"), OUTCOMES.map(([value, text]) => h("option", { value }, text))),
    range: h("select", { id: "calls-range", name: "range" }, RANGES.map(([value, text]) => h("option", { value }, text))),
    since: h("input", { id: "calls-since", name: "since", type: "datetime-local", step: 1 }),
    until: h("input", { id: "calls-until", name: "until", type: "datetime-local", step: 1 }),
    limit: h("input", { id: "calls-limit", name: "limit", type: "number", min: 1, max: 1000, step: 1, inputmode: "numeric", placeholder: String(DEFAULT_LIMIT) }),
    execution: h("input", { id: "calls-execution", name: "execution_id", type: "text", autocomplete: "off", spellcheck: "false", placeholder: "01a2…" }),
  };
  const field = (control, text, extra = null) => h("div", { class: `filter-field${extra ? ` ${extra}` : ""}` }, h("label", { for: control.id }, text), control);
  const custom = h(
    "div",
    { class: "filter-custom" },
    field(controls.since, "From"),
    field(controls.until, "To"),
    h("p", { class: "muted hint filter-zone" }, `Times in your browser's zone (${Intl.DateTimeFormat().resolvedOptions().timeZone || "local"}).`),
  );
  const form = h(
    "form",
    { class: "card call-filters", role: "search", "aria-label": "Filter calls" },
    h(
      "div",
      { class: "filter-row" },
      field(controls.tool, "Tool"),
      field(controls.outcome, "Outcome"),
      field(controls.range, "Time"),
      field(controls.limit, "How many", "filter-narrow"),
      field(controls.execution, "Execution id", "filter-wide"),
    ),
    custom,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary" }, "Apply filters"),
      h("button", { type: "button", class: "quiet", onclick: () => apply(emptyFilters()) }, "Reset"),
    ),
  );

  const summary = h("div", { class: "calls-summary" });
  const results = h("div", { id: "call-list", class: "calls-results", "aria-live": "polite", "aria-busy": "false" });

  main.append(
    h("a", { class: "back-link", href: base }, `← ${server.name}`),
    heading(
      `Call log of ${server.name}`,
      h("button", { type: "button", onclick: () => load(), "aria-controls": "call-list" }, "Refresh"),
    ),
    form,
    summary,
    results,
  );

  function fill() {
    controls.tool.value = filters.tool;
    controls.outcome.value = filters.outcome;
    controls.range.value = filters.range;
    controls.since.value = filters.since ? toLocalInput(filters.since) : "";
    controls.until.value = filters.until ? toLocalInput(filters.until) : "";
    controls.limit.value = filters.limit || "";
    controls.execution.value = filters.execution_id;
    custom.hidden = filters.range !== "custom";
  }

  function fromForm() {
    const next = {
      tool: controls.tool.value,
      outcome: controls.outcome.value,
      range: controls.range.value,
      since: "",
      until: "",
      limit: controls.limit.value.trim(),
      execution_id: controls.execution.value.trim(),
    };
    if (next.range === "custom") {
      next.since = controls.since.value ? apiTime(new Date(controls.since.value)) : "";
      next.until = controls.until.value ? apiTime(new Date(controls.until.value)) : "";
    }
    return next;
  }

  // Applying filters: the address changes (a new history entry, so Back returns to the previous
  // view) without re-rendering the page, and the list reloads.
  function apply(next) {
    filters = next;
    fill();
    const route = `/servers/${encodeURIComponent(id)}/calls${queryString(filters)}`;
    if (location.hash !== `#${route}`) history.pushState(null, "", `#${route}`);
    load();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = fromForm();
    const problem = check(next);
    if (problem) {
      replace(summary, errorBox({ message: problem.message }));
      problem.control(controls).focus();
      return;
    }
    apply(next);
  });
  for (const name of ["tool", "outcome"]) controls[name].addEventListener("change", () => apply(fromForm()));
  controls.range.addEventListener("change", () => {
    custom.hidden = controls.range.value !== "custom";
    if (controls.range.value === "custom") {
      // Start from the last hour, which the operator then adjusts.
      if (!controls.since.value) controls.since.value = toLocalInput(apiTime(new Date(Date.now() - 3_600_000)));
      controls.since.focus();
    } else {
      apply(fromForm());
    }
  });

  async function load() {
    const ticket = ++loadTicket;
    results.setAttribute("aria-busy", "true");
    const apiQuery = new URLSearchParams();
    apiQuery.set("limit", filters.limit || String(DEFAULT_LIMIT));
    if (filters.tool) apiQuery.set("tool", filters.tool);
    if (filters.outcome) apiQuery.set("outcome", filters.outcome);
    const span = timeWindow(filters);
    if (span.since) apiQuery.set("since", span.since);
    if (span.until) apiQuery.set("until", span.until);
    if (filters.execution_id) apiQuery.set("execution_id", filters.execution_id);
    const url = api.path`/admin/servers/${id}/calls`;
    try {
      let answer;
      let narrowedHere = false;
      try {
        answer = await api.get(`${url}?${apiQuery}`, { signal });
      } catch (error) {
        // A daemon from before the filters refuses them: read the newest calls and filter here.
        if (error.code !== "invalid_query" || !/unknown field/.test(error.message) || !active(filters)) throw error;
        answer = await api.get(`${url}?limit=1000`, { signal });
        narrowedHere = true;
      }
      if (ticket !== loadTicket) return;
      show(answer.calls || [], span, narrowedHere);
    } catch (error) {
      if (error.name === "AbortError" || ticket !== loadTicket) return;
      summary.replaceChildren();
      replace(results, errorBox(error, error.code === "invalid_query" ? "Change the filters and apply them again." : null));
    } finally {
      if (ticket === loadTicket) results.setAttribute("aria-busy", "false");
    }
  }

  function show(calls, span, narrowedHere) {
    const wanted = filters.execution_id;
    const limit = Number(filters.limit || DEFAULT_LIMIT);
    // Narrow here anything the daemon did not (one from before the filters answers every call).
    const shown = calls.filter((call) => matchesLocally(call, filters, span)).slice(0, limit);
    const parts = [`${number.format(shown.length)} ${shown.length === 1 ? "call" : "calls"}`, active(filters) ? " matching the filters" : "", ", newest first"];
    if (shown.length >= limit) parts.push(` (at most ${number.format(limit)}; raise “How many” for more)`);
    if (narrowedHere) parts.push(`. This daemon does not filter its call log, so the newest ${number.format(calls.length)} calls were filtered here.`);
    replace(summary, shown.length ? h("p", { class: "muted", role: "status" }, parts.join("")) : null);
    if (wanted) {
      summary.append(
        h("p", { class: "notice" }, "Showing call ", h("code", {}, wanted), ". ", h("a", { href: `${base}/calls` }, "Show all calls")),
      );
    }
    if (shown.length === 0) {
      replace(
        results,
        active(filters)
          ? emptyState(
              wanted ? "That call is not in the log" : "No calls match these filters",
              wanted
                ? "It may not have finished yet, or it was made on another server. Calls are logged when they finish."
                : "Widen the time range, choose another outcome or tool, or reset the filters.",
              h("button", { type: "button", onclick: () => apply(emptyFilters()) }, "Reset the filters"),
            )
          : emptyState(
              "No calls yet",
              [
                "A call is logged here when it finishes: from an MCP client on ",
                h("code", {}, server.mcp_path),
                ", from trying a tool on its page, or from ",
                h("code", {}, `mcpbootd call ${server.id} <tool>`),
                ".",
              ],
              (server.tools || []).length ? h("a", { class: "button", href: `${base}/tools` }, "Try a tool") : null,
            ),
      );
      return;
    }
    const table = callTable(shown, id);
    replace(results, table);
    if (wanted) {
      const index = shown.findIndex((call) => call.execution_id === wanted || (call.children || []).some((child) => child.execution_id === wanted));
      const row = index >= 0 ? table.querySelectorAll("tr.call-row")[index] : null;
      if (row) {
        reveal(row, wanted);
        row.scrollIntoView({ block: "center" });
      } else {
        summary.append(h("p", { class: "notice" }, "Call ", h("code", {}, wanted), " is not among these calls."));
      }
    }
  }

  fill();
  await load();
  return () => controller.abort();
}

// Filters and the address.

function emptyFilters() {
  return { tool: "", outcome: "", range: "", since: "", until: "", limit: "", execution_id: "" };
}

function readFilters(query) {
  const filters = emptyFilters();
  for (const key of FILTER_KEYS) filters[key] = (query.get(key) || "").trim();
  if (!RANGES.some(([value]) => value === filters.range)) filters.range = "";
  if ((filters.since || filters.until) && !filters.range) filters.range = "custom";
  if (filters.range !== "custom") {
    filters.since = "";
    filters.until = "";
  }
  if (!OUTCOMES.some(([value]) => value === filters.outcome)) filters.outcome = "";
  return filters;
}

function queryString(filters) {
  const out = new URLSearchParams();
  for (const key of FILTER_KEYS) {
    if (key === "range" && filters.range === "custom") continue; // since/until say it
    if (filters[key]) out.set(key, filters[key]);
  }
  const text = out.toString();
  return text ? `?${text}` : "";
}

function active(filters) {
  return Boolean(filters.tool || filters.outcome || filters.range || filters.execution_id);
}

function check(filters) {
  if (filters.limit && !/^\d+$/.test(filters.limit)) return { message: "“How many” must be a whole number from 1 to 1000.", control: (c) => c.limit };
  if (filters.limit && (Number(filters.limit) < 1 || Number(filters.limit) > 1000)) return { message: "“How many” must be from 1 to 1000.", control: (c) => c.limit };
  if (filters.range === "custom" && !filters.since && !filters.until) return { message: "Give a start or an end time, or choose another time range.", control: (c) => c.since };
  if (filters.since && filters.until && filters.since >= filters.until) return { message: "The start must be before the end.", control: (c) => c.until };
  return null;
}

/** The API's since/until for these filters; presets count back from now. */
function timeWindow(filters) {
  const preset = RANGES.find(([value]) => value === filters.range);
  if (preset && preset[2]) return { since: apiTime(new Date(Date.now() - preset[2])), until: "" };
  if (filters.range === "custom") return { since: filters.since, until: filters.until };
  return { since: "", until: "" };
}

function matchesLocally(call, filters, span) {
  if (filters.execution_id) {
    return call.execution_id === filters.execution_id || (call.children || []).some((child) => child.execution_id === filters.execution_id);
  }
  if (filters.tool && call.tool !== filters.tool) return false;
  if (filters.outcome && call.outcome !== filters.outcome) return false;
  // As instants: the API's times have milliseconds, the filter's whole seconds.
  const started = Date.parse(call.started_at);
  if (span.since && started < Date.parse(span.since)) return false;
  if (span.until && started >= Date.parse(span.until)) return false;
  return true;
}

/** RFC 3339 in UTC, whole seconds (what the API reads). */
function apiTime(date) {
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** An RFC 3339 time as a datetime-local value in the browser's zone. */
function toLocalInput(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

// The table.

let rowCounter = 0;

function callTable(calls, serverId) {
  // The caller column shows when a call was made with an OAuth token (the daemon records who).
  const withCaller = calls.some(hasCaller);
  return h(
    "div",
    { class: "table-wrap stack calls-table-wrap" },
    h(
      "table",
      { class: "calls-table" },
      h("caption", { class: "visually-hidden" }, "Calls, newest first; expand a call for its requests and console output"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Time"),
          h("th", { scope: "col" }, "Tool"),
          h("th", { scope: "col", class: "col-via" }, "Via"),
          withCaller ? h("th", { scope: "col", class: "col-caller" }, "Caller") : null,
          h("th", { scope: "col" }, "Outcome"),
          h("th", { scope: "col", class: "number" }, "Duration"),
          h("th", { scope: "col", class: "number col-fetches" }, "Fetches"),
          h("th", { scope: "col", class: "col-error" }, "Error"),
        ),
      ),
      calls.map((call) => callRows(call, serverId, withCaller)),
    ),
  );
}

/** One call: its row and its (hidden) detail row, in a tbody of their own. */
function callRows(call, serverId, withCaller) {
  const detailId = `call-detail-${++rowCounter}`;
  const toggle = h(
    "button",
    {
      type: "button",
      class: "call-toggle",
      "aria-expanded": "false",
      "aria-controls": detailId,
      "aria-label": `${call.tool} call at ${localTime(call.started_at)}`,
    },
    h("span", { class: "chevron", "aria-hidden": "true" }),
    time(call.started_at),
  );
  let built = false;
  const cell = h("td", { colspan: withCaller ? 8 : 7 });
  const detail = h("tr", { class: "call-detail", id: detailId, hidden: true }, cell);
  const row = h(
    "tr",
    { class: `call-row outcome-${call.outcome}`, "data-execution-id": call.execution_id },
    h("td", { class: "card-title col-time", "data-label": "Time" }, toggle),
    h("td", { "data-label": "Tool" }, h("code", {}, call.tool)),
    h("td", { class: "col-via hide-narrow", "data-label": "Via" }, call.via),
    withCaller
      ? h("td", { class: `col-caller${hasCaller(call) ? "" : " hide-narrow"}`, "data-label": "Caller" }, hasCaller(call) ? callerText(call) : h("span", { class: "muted" }, "—"))
      : null,
    h("td", { "data-label": "Outcome" }, badge(call.outcome)),
    h("td", { class: "number", "data-label": "Duration" }, durationUs(call.duration_us)),
    h("td", { class: "number col-fetches", "data-label": "Fetches" }, String(call.fetches ?? 0)),
    h("td", { class: `col-error card-wide${call.error ? "" : " hide-narrow"}`, "data-label": "Error" }, call.error ? h("span", { class: "error-snippet", title: call.error }, call.error) : h("span", { class: "muted" }, "—")),
  );
  toggle.addEventListener("click", () => {
    const open = toggle.getAttribute("aria-expanded") !== "true";
    if (open && !built) {
      built = true;
      cell.append(callDetail(call, serverId));
    }
    toggle.setAttribute("aria-expanded", String(open));
    detail.hidden = !open;
    row.classList.toggle("expanded", open);
  });
  return h("tbody", { class: "call" }, row, detail);
}

/** Expands and marks the call `row`, or in the script call `row` the tool call `wanted`. */
function reveal(row, wanted) {
  const toggle = row.querySelector(".call-toggle");
  if (toggle && toggle.getAttribute("aria-expanded") !== "true") toggle.click();
  if (row.dataset.executionId === wanted) row.classList.add("highlight");
  const child = row.parentElement.querySelector(`details[data-execution-id="${CSS.escape(wanted)}"]`);
  if (child) {
    child.open = true;
    child.classList.add("highlight");
    row.classList.add("highlight-parent");
  }
}

/** A call's details: facts, error, outbound requests, console, and a script's code and calls. */
function callDetail(call, serverId) {
  const parts = [];
  const facts = [
    ["Execution id", h("code", {}, call.execution_id)],
    ["Started", [localTime(call.started_at), " (", time(call.started_at), ")"]],
    ["Duration", durationUs(call.duration_us)],
    ["Via", viaText(call.via)],
    hasCaller(call) ? ["Caller", callerText(call, { long: true })] : null,
    ["Generation", String(call.generation_id)],
  ];
  if (call.parent_execution_id) {
    facts.push([
      "Made by script",
      h("a", { href: `#/servers/${encodeURIComponent(serverId)}/calls?execution_id=${encodeURIComponent(call.parent_execution_id)}` }, h("code", {}, call.parent_execution_id)),
    ]);
  }
  parts.push(h("dl", { class: "facts call-facts" }, facts.filter(Boolean).map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])));
  if (call.error) parts.push(h("h3", {}, "Error"), h("pre", { class: "code call-error" }, call.error));
  const egress = call.egress || [];
  parts.push(h("h3", {}, `Outbound requests (${egress.length})`));
  parts.push(egress.length ? egressTable(egress) : h("p", { class: "muted" }, "None: the handler made no requests."));
  parts.push(h("h3", {}, "Console output"));
  parts.push(call.console ? h("pre", { class: "code console-output" }, call.console) : h("p", { class: "muted" }, "Nothing was written to the console."));
  if (call.code) parts.push(h("h3", {}, "Script"), code(call.code, "javascript"));
  const children = call.children || [];
  if (children.length || call.tool === "code_execution") {
    parts.push(h("h3", {}, `Tool calls made by the script (${children.length})`));
    parts.push(
      children.length
        ? h("div", { class: "child-calls" }, children.map((child) => childCall(child, serverId)))
        : h("p", { class: "muted" }, "The script called no tools."),
    );
  }
  return h("div", { class: "call-detail-body" }, parts);
}

function childCall(call, serverId) {
  const details = h(
    "details",
    { class: "child-call", "data-execution-id": call.execution_id },
    h(
      "summary",
      {},
      h("code", {}, call.tool),
      " ",
      badge(call.outcome),
      h("span", { class: "muted" }, ` ${durationUs(call.duration_us)} · ${localTime(call.started_at)}`),
      hasCaller(call) ? h("span", { class: "muted child-caller" }, " · by ", callerText(call)) : null,
      call.error ? h("span", { class: "error-snippet" }, ` — ${call.error}`) : null,
    ),
  );
  details.addEventListener("toggle", () => {
    if (details.open && details.childElementCount === 1) details.append(callDetail(call, serverId));
  });
  return details;
}

function hasCaller(call) {
  return Boolean(call.subject || call.client_id);
}

/** Who made a call with an OAuth token: its subject, and the client it used. */
function callerText(call, { long = false } = {}) {
  return h(
    "span",
    { class: "call-caller" },
    call.subject ? h("code", { class: "call-subject" }, call.subject) : h("span", { class: "muted" }, "unknown subject"),
    call.client_id ? [long ? " with the OAuth client " : " via ", h("code", { class: "call-client" }, call.client_id)] : null,
  );
}

function viaText(via) {
  return { mcp: "MCP (tools/call on the mount)", admin: "admin API", script: "code-mode script" }[via] || via;
}

function egressTable(egress) {
  return h(
    "div",
    { class: "table-wrap stack egress-wrap" },
    h(
      "table",
      { class: "egress-table" },
      h("caption", { class: "visually-hidden" }, "Outbound requests"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Request"),
          h("th", { scope: "col" }, "Result"),
          h("th", { scope: "col", class: "number" }, "Bytes"),
          h("th", { scope: "col", class: "number" }, "Time"),
          h("th", { scope: "col" }, "Credentials"),
          h("th", { scope: "col" }, "Reason"),
        ),
      ),
      h(
        "tbody",
        {},
        egress.map((request) =>
          h(
            "tr",
            { class: request.allowed ? "" : "denied" },
            h("td", { class: "egress-request card-title", "data-label": "Request" }, h("code", {}, `${request.method} ${request.host}${request.path}`)),
            h(
              "td",
              { "data-label": "Result" },
              request.allowed ? badge("allowed") : badge("denied"),
              request.status !== null && request.status !== undefined ? h("span", { class: "http-status" }, ` ${request.status}`) : null,
            ),
            h("td", { class: "number", "data-label": "Bytes" }, bytes(request.bytes)),
            h("td", { class: "number", "data-label": "Time" }, durationUs(request.duration_us)),
            h("td", { "data-label": "Credentials" }, (request.credentials || []).length ? request.credentials.map((name, i) => [i ? ", " : "", h("code", {}, name)]) : h("span", { class: "muted" }, "—")),
            h("td", { class: `egress-reason card-wide${request.reason ? "" : " hide-narrow"}`, "data-label": "Reason" }, request.reason || h("span", { class: "muted" }, "—")),
          ),
        ),
      ),
    ),
  );
}
