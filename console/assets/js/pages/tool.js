// One tool of a server (`#/servers/:id/tools/:tool`): what it is (description, schemas,
// annotations, handler, self-test, health) and a form to call it through the admin API.

import * as api from "../api.js";
import { badge, code, durationMs, emptyState, errorBox, h, heading, jsonBlock, replace } from "../dom.js";
import { FieldError, schemaForm } from "../forms.js";
import { annotationBadges, breadcrumbs, copyButton, healthSummary, selfTestBadge, serverHref } from "../server-ui.js";

export async function render(main, params) {
  const { id, tool: toolName } = params;
  let server;
  try {
    server = await api.get(api.path`/admin/servers/${id}`);
  } catch (error) {
    main.append(
      breadcrumbs([["Servers", "#/servers"], [id, serverHref(id)], [toolName]]),
      heading(toolName),
      errorBox(error, error.status === 404 ? "The server may have been deleted; the server list shows those there are." : null),
    );
    return;
  }
  const served = server.tools.find((tool) => tool.name === toolName);
  const pending = served ? null : (server.latest_generation?.tools || []).find((tool) => tool.name === toolName);
  const tool = served || pending;
  const crumbs = breadcrumbs([
    ["Servers", "#/servers"],
    [server.name, serverHref(id)],
    ["Tools", serverHref(id, "tools")],
    [toolName],
  ]);
  if (!tool) {
    main.append(
      crumbs,
      heading(toolName),
      emptyState(
        "No such tool",
        `Server ${id} serves no tool called ${toolName}. It may have been renamed or removed by a newer version.`,
        h("a", { href: serverHref(id, "tools") }, "See the server's tools"),
      ),
    );
    return;
  }

  const titleLine = tool.title || tool.annotations?.title;
  main.append(
    crumbs,
    heading(
      tool.name,
      h("a", { href: `${serverHref(id, "calls")}?tool=${encodeURIComponent(tool.name)}` }, "Calls of this tool"),
    ),
    h(
      "div",
      { class: "sv-tool-intro card" },
      titleLine ? h("p", { class: "sv-tool-title" }, titleLine) : null,
      h("div", { class: "sv-badges" }, annotationBadges(tool.annotations), selfTestBadge(tool.self_test), tool.needs_network === true ? badge("uses the network", "info") : null),
      h("p", { class: "sv-description" }, tool.description || h("span", { class: "muted" }, "No description.")),
      pending
        ? h(
            "p",
            { class: "notice" },
            `This tool is in version ${server.latest_generation.version} (${server.latest_generation.status.replace(/_/g, " ")}), which is not served, so it cannot be called yet.`,
          )
        : null,
    ),
    h(
      "div",
      { class: "sv-tool-grid" },
      h("div", { class: "sv-tool-main" }, served ? tryTool(id, tool) : null),
      h("div", { class: "sv-tool-side" }, details(tool)),
    ),
    h("section", { class: "sv-section", "aria-labelledby": "sv-handler-h" }, h("h2", { id: "sv-handler-h" }, "Handler"), handlerBlock(tool.handler)),
  );
}

function handlerBlock(handler) {
  return h(
    "div",
    {},
    h("p", { class: "muted" }, "The body of ", h("code", {}, "async function (args, fetch)"), ", run in its own isolate for each call."),
    code(handler || "", "javascript"),
  );
}

function details(tool) {
  const selfTest = tool.self_test;
  return [
    h("section", { class: "sv-section", "aria-labelledby": "sv-input-h" }, h("h2", { id: "sv-input-h" }, "Input schema"), jsonBlock(tool.input_schema || {})),
    h(
      "section",
      { class: "sv-section", "aria-labelledby": "sv-output-h" },
      h("h2", { id: "sv-output-h" }, "Output schema"),
      tool.output_schema ? jsonBlock(tool.output_schema) : h("p", { class: "muted" }, "None: the result is not checked against a schema."),
    ),
    h(
      "section",
      { class: "sv-section", "aria-labelledby": "sv-annotations-h" },
      h("h2", { id: "sv-annotations-h" }, "Annotations"),
      tool.annotations && Object.keys(tool.annotations).length
        ? jsonBlock(tool.annotations)
        : h("p", { class: "muted" }, "None; MCP clients are told readOnlyHint: false."),
    ),
    h(
      "section",
      { class: "sv-section", "aria-labelledby": "sv-selftest-h" },
      h("h2", { id: "sv-selftest-h" }, "Self-test"),
      selfTest
        ? h(
            "dl",
            { class: "facts" },
            h("dt", {}, "Status"),
            h("dd", {}, selfTestBadge(selfTest)),
            selfTest.attempts !== undefined ? [h("dt", {}, "Attempts"), h("dd", {}, String(selfTest.attempts))] : null,
            selfTest.error ? [h("dt", {}, "Error"), h("dd", {}, h("span", { class: "sv-pre" }, selfTest.error))] : null,
            selfTest.reason ? [h("dt", {}, "Reason"), h("dd", {}, h("span", { class: "sv-pre" }, selfTest.reason))] : null,
          )
        : h("p", { class: "muted" }, "Not self-tested (registered as written)."),
    ),
    h(
      "section",
      { class: "sv-section", "aria-labelledby": "sv-health-h" },
      h("h2", { id: "sv-health-h" }, "Health"),
      tool.health ? h("p", {}, healthSummary(tool.health)) : h("p", { class: "muted" }, "No calls judged yet."),
    ),
  ];
}

/** The "Try this tool" form and its result. */
function tryTool(serverId, tool) {
  const schema = tool.input_schema || {};
  const fields = schemaForm(schema, { idPrefix: "arg" });
  const rawArea = h("textarea", { id: "raw-arguments", rows: 10, spellcheck: "false", class: "sv-json", "aria-describedby": "raw-arguments-hint" });
  const raw = h(
    "div",
    { class: "sv-raw", hidden: true },
    h("label", { for: "raw-arguments" }, "Arguments (JSON)"),
    rawArea,
    h("p", { id: "raw-arguments-hint", class: "muted sv-hint" }, "A JSON object, sent as ", h("code", {}, "arguments"), "."),
  );
  const toggle = h("button", { type: "button", class: "quiet", "aria-pressed": "false", "aria-controls": "raw-arguments" }, "Edit as raw JSON");
  const submit = h("button", { type: "submit", class: "primary" }, "Call tool");
  const status = h("div", { class: "sv-call-status", "aria-live": "polite" });
  const result = h("div", { class: "sv-result-body" });
  const resultSection = h(
    "section",
    { class: "sv-section sv-result", "aria-labelledby": "sv-result-h", hidden: true, id: "call-result" },
    h("h2", { id: "sv-result-h", tabindex: "-1" }, "Result"),
    result,
  );
  const open = schema.additionalProperties !== undefined && schema.additionalProperties !== false;
  const noArguments =
    fields.fieldCount === 0
      ? h("p", { class: "muted" }, open ? "The input schema lists no properties; give arguments with Edit as raw JSON." : "This tool takes no arguments.")
      : null;
  const form = h(
    "form",
    // The form checks its fields itself (reportValidity) in form mode; in raw mode the hidden
    // fields are not checked.
    { class: "card sv-try", "aria-labelledby": "sv-try-h", novalidate: true },
    h("div", { class: "sv-try-head" }, h("h2", { id: "sv-try-h" }, "Try this tool"), toggle),
    h(
      "div",
      { class: "sv-form-fields" },
      fields.fieldCount ? h("p", { class: "muted sv-hint" }, "Fields marked ", h("span", { class: "sv-required" }, "*"), " are required.") : null,
      noArguments,
      fields.element,
    ),
    raw,
    h("div", { class: "actions" }, submit),
    status,
  );
  let rawMode = false;

  toggle.addEventListener("click", () => {
    replace(status);
    if (!rawMode) {
      fields.clearErrors();
      rawArea.value = JSON.stringify(fields.read({ strict: false }), null, 2);
      setMode(true);
      rawArea.focus();
      return;
    }
    let values;
    try {
      values = parseArguments(rawArea.value);
    } catch (error) {
      replace(status, errorBox(error, "Fix the JSON, or keep editing it here."));
      rawArea.focus();
      return;
    }
    const refused = fields.write(values);
    if (refused.length) {
      replace(
        status,
        errorBox({ message: `The form cannot show ${refused.join(", ")} as given; keep editing the arguments as raw JSON.` }),
      );
      return;
    }
    setMode(false);
    toggle.focus();
  });

  function setMode(on) {
    rawMode = on;
    raw.hidden = !on;
    form.querySelector(".sv-form-fields").hidden = on;
    toggle.setAttribute("aria-pressed", String(on));
    toggle.textContent = on ? "Edit as form" : "Edit as raw JSON";
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status);
    let args;
    if (rawMode) {
      try {
        args = parseArguments(rawArea.value);
      } catch (error) {
        replace(status, errorBox(error));
        rawArea.focus();
        return;
      }
    } else {
      fields.clearErrors();
      if (!form.reportValidity()) return;
      try {
        args = fields.read({ strict: true });
      } catch (error) {
        if (!(error instanceof FieldError)) throw error;
        error.input.setCustomValidity(error.message);
        error.input.reportValidity();
        replace(status, errorBox({ message: error.message }));
        error.input.focus();
        return;
      }
    }
    submit.disabled = true;
    submit.setAttribute("aria-busy", "true");
    resultSection.hidden = true;
    replace(status, h("p", { class: "muted" }, "Calling…"));
    const started = performance.now();
    try {
      const answer = await api.post(api.path`/admin/servers/${serverId}/tools/${tool.name}/call`, { arguments: args });
      const elapsed = performance.now() - started;
      replace(status, h("p", { class: "muted" }, `The call finished: ${answer.outcome}${answer.result?.isError ? " (tool error)" : ""}.`));
      replace(result, renderResult(serverId, answer, elapsed));
      resultSection.hidden = false;
    } catch (error) {
      if (error.name === "AbortError") return;
      const hint =
        error.status === 422
          ? "The arguments do not fit the tool's input schema; change them and call again."
          : error.status === 503
            ? "The server cannot take calls now; its page says why."
            : null;
      replace(status, errorBox(error, hint));
    } finally {
      submit.disabled = false;
      submit.removeAttribute("aria-busy");
    }
  });

  return [form, resultSection];
}

function parseArguments(text) {
  if (text.trim() === "") return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new Error(`The arguments are not valid JSON: ${error.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("The arguments must be a JSON object ({…}).");
  return value;
}

/** A `CallResult`: outcome, execution id, content items, structured content. */
export function renderResult(serverId, answer, elapsedMs) {
  const result = answer.result || {};
  const content = Array.isArray(result.content) ? result.content : [];
  const callsHref = `${serverHref(serverId, "calls")}?execution_id=${encodeURIComponent(answer.execution_id)}`;
  return h(
    "div",
    { class: result.isError ? "sv-result-inner sv-result-error" : "sv-result-inner" },
    h(
      "div",
      { class: "sv-result-meta" },
      h("span", {}, "Outcome ", badge(answer.outcome)),
      result.isError ? h("strong", { class: "sv-iserror" }, badge("isError: true", "error"), " The tool reported an error.") : null,
      elapsedMs !== undefined ? h("span", { class: "muted" }, `Round trip ${durationMs(elapsedMs)}`) : null,
      h(
        "span",
        { class: "sv-execution" },
        "Execution ",
        h("a", { href: callsHref, class: "sv-execution-link", "aria-label": `Execution ${answer.execution_id} in the call log` }, h("code", {}, answer.execution_id)),
        " ",
        copyButton(answer.execution_id, "execution id"),
      ),
    ),
    h("h3", {}, "Content"),
    content.length
      ? h("ol", { class: "sv-content" }, content.map((item, index) => h("li", {}, contentItem(item, index, result.structuredContent))))
      : h("p", { class: "muted" }, "The tool returned no content."),
    result.structuredContent !== undefined && result.structuredContent !== null
      ? [h("h3", {}, "Structured content"), jsonBlock(result.structuredContent)]
      : null,
  );
}

function contentItem(item, index, structured) {
  const type = item && typeof item === "object" ? item.type : null;
  if (type === "text" && typeof item.text === "string") {
    const parsed = jsonLooking(item.text);
    if (parsed !== undefined && structured !== undefined && JSON.stringify(parsed) === JSON.stringify(structured)) {
      // A result object comes as its JSON text too; the structured content below shows it.
      return h("details", { class: "sv-same" }, h("summary", {}, "text: the structured content as JSON"), jsonBlock(parsed));
    }
    return [h("p", { class: "sv-item-type muted" }, "text"), parsed !== undefined ? jsonBlock(parsed) : h("pre", { class: "sv-text" }, item.text)];
  }
  if (type === "image" && typeof item.data === "string" && /^image\/[\w.+-]+$/.test(item.mimeType || "") && /^[A-Za-z0-9+/=\s]*$/.test(item.data)) {
    return [
      h("p", { class: "sv-item-type muted" }, `image (${item.mimeType})`),
      h("img", { class: "sv-image", src: `data:${item.mimeType};base64,${item.data.replace(/\s/g, "")}`, alt: `Image ${index + 1} the tool returned (${item.mimeType})` }),
    ];
  }
  return [h("p", { class: "sv-item-type muted" }, type || "item"), jsonBlock(item)];
}

/** The value of text that is a JSON object or array, else undefined. */
function jsonLooking(text) {
  const trimmed = text.trim();
  if (!(trimmed.startsWith("{") && trimmed.endsWith("}")) && !(trimmed.startsWith("[") && trimmed.endsWith("]"))) return undefined;
  try {
    return JSON.parse(trimmed);
  } catch {
    return undefined;
  }
}
