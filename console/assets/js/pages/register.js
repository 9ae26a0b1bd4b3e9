// Registering a server: from a prompt (generated in the background), from an OpenAPI document
// (derived in the background) or from a hand-written toolset (ready at once). The body is what
// `POST /admin/servers` takes; the daemon tells the three apart by which of `prompt`,
// `openapi`/`openapi_spec` and `tools` it has. A refused registration shows the API's message
// next to the form, and the form keeps what was typed.

import * as api from "../api.js";
import { confirmDialog, errorBox, h, heading, replace, toast } from "../dom.js";
import { go } from "../main.js";

const MODES = [
  ["prompt", "Prompt", "Describe the tools; an LLM plans and writes them."],
  ["openapi", "OpenAPI document", "One tool per operation of an API description."],
  ["toolset", "Toolset JSON", "Hand-written tools, ready at once."],
];

const ID_PATTERN = "[a-z0-9][a-z0-9\\-]{0,62}";
const TOKEN_PATTERN = "[!-~]{16,512}";

const EXAMPLE_TOOLSET = {
  name: "Example",
  description: "Adds numbers.",
  allow_domains: [],
  tools: [
    {
      name: "add",
      description: "Add two numbers",
      input_schema: {
        type: "object",
        properties: { a: { type: "number" }, b: { type: "number" } },
        required: ["a", "b"],
      },
      handler: "return { content: [{ type: 'text', text: String(args.a + args.b) }] };",
    },
  ],
};

export function render(main, _params, query) {
  let mode = MODES.some(([name]) => name === query.get("mode")) ? query.get("mode") : "prompt";
  let parseTimer = null;

  // Inputs, by name.
  const field = (tag, attributes) => h(tag, { name: attributes.id.replace(/^reg-/, ""), ...attributes });
  const inputs = {
    prompt: field("textarea", { id: "reg-prompt", rows: 7, required: true, "aria-describedby": "reg-prompt-help" }),
    openapi: field("input", { id: "reg-openapi", type: "url", inputmode: "url", placeholder: "https://example.com/openapi.json", "aria-describedby": "reg-openapi-help" }),
    openapiSpec: field("textarea", { id: "reg-openapi-spec", rows: 4, spellcheck: "false", "aria-describedby": "reg-openapi-spec-help" }),
    baseUrl: field("input", { id: "reg-base-url", type: "url", inputmode: "url", placeholder: "https://api.example.com/v1", "aria-describedby": "reg-base-url-help" }),
    include: field("textarea", { id: "reg-include", rows: 2, spellcheck: "false", placeholder: "tag:pets\nGET /pets/{id}", "aria-describedby": "reg-operations-help" }),
    exclude: field("textarea", { id: "reg-exclude", rows: 2, spellcheck: "false", placeholder: "DELETE /pets/{id}", "aria-describedby": "reg-operations-help" }),
    openapiPrompt: field("textarea", { id: "reg-openapi-prompt", rows: 3, "aria-describedby": "reg-openapi-prompt-help" }),
    toolset: field("textarea", { id: "reg-toolset", rows: 16, spellcheck: "false", required: true, "aria-describedby": "reg-toolset-status reg-toolset-help", class: "toolset-json" }),
    id: field("input", { id: "reg-id", type: "text", autocomplete: "off", spellcheck: "false", pattern: ID_PATTERN, maxlength: 63, "aria-describedby": "reg-id-help" }),
    name: field("input", { id: "reg-name", type: "text", autocomplete: "off", maxlength: 200 }),
    description: field("textarea", { id: "reg-description", rows: 2, class: "prose", "aria-describedby": "reg-description-help" }),
    allowDomains: field("input", { id: "reg-allow-domains", type: "text", autocomplete: "off", spellcheck: "false", placeholder: "api.example.com, docs.example.com", "aria-describedby": "reg-allow-domains-help" }),
    dryRun: field("input", { id: "reg-dry-run", type: "checkbox", "aria-describedby": "reg-dry-run-help" }),
    approval: h(
      "select",
      { id: "reg-approval", name: "approval", "aria-describedby": "reg-approval-help" },
      h("option", { value: "" }, "As the daemon is configured"),
      h("option", { value: "true" }, "Wait for approval"),
      h("option", { value: "false" }, "Serve at once"),
    ),
    token: field("input", { id: "reg-token", type: "password", autocomplete: "new-password", spellcheck: "false", pattern: TOKEN_PATTERN, maxlength: 512, "aria-describedby": "reg-token-help" }),
  };
  inputs.prompt.classList.add("prose");
  inputs.openapiPrompt.classList.add("prose");

  const help = (id, ...text) => h("p", { id, class: "muted hint" }, ...text);
  const label = (input, text, optional = false) =>
    h("label", { for: input.id }, text, optional ? h("span", { class: "optional" }, " (optional)") : null);

  // Mode switch: a radio group (arrow keys move between them).
  const radios = MODES.map(([name, text, description]) =>
    h(
      "label",
      { class: "mode-option" },
      h("input", { type: "radio", name: "mode", value: name, checked: name === mode, "aria-labelledby": `reg-mode-${name}-name`, "aria-describedby": `reg-mode-${name}-help` }),
      h("span", { class: "mode-name", id: `reg-mode-${name}-name` }, text),
      h("span", { id: `reg-mode-${name}-help`, class: "mode-help muted" }, description),
    ),
  );
  const modeSwitch = h("fieldset", { class: "mode-switch" }, h("legend", {}, "Register from"), radios);

  // Per-mode sections; the inactive ones are disabled so their fields are not validated.
  const sections = {
    prompt: h(
      "fieldset",
      { class: "mode-section", "data-mode": "prompt" },
      h("legend", { class: "visually-hidden" }, "Prompt"),
      label(inputs.prompt, "Prompt"),
      inputs.prompt,
      help("reg-prompt-help", "What the tools should do, with links to the API's documentation. The daemon fetches the linked pages, plans the tools and writes and tests a handler for each."),
    ),
    openapi: h(
      "fieldset",
      { class: "mode-section", "data-mode": "openapi" },
      h("legend", { class: "visually-hidden" }, "OpenAPI document"),
      label(inputs.openapi, "Document URL"),
      inputs.openapi,
      help("reg-openapi-help", "OpenAPI 3.0/3.1 or Swagger 2.0, JSON or YAML. GitHub pages are read raw."),
      h(
        "details",
        { class: "paste-spec", open: false },
        h("summary", {}, "Or paste the document"),
        label(inputs.openapiSpec, "Document text"),
        inputs.openapiSpec,
        help("reg-openapi-spec-help", "Used instead of the URL: JSON or YAML."),
      ),
      label(inputs.baseUrl, "Base URL", true),
      inputs.baseUrl,
      help("reg-base-url-help", "Replaces the document's servers (or host and basePath)."),
      h(
        "div",
        { class: "two-columns" },
        h("div", {}, label(inputs.include, "Operations to include", true), inputs.include),
        h("div", {}, label(inputs.exclude, "Operations to exclude", true), inputs.exclude),
      ),
      help(
        "reg-operations-help",
        "One per line: ",
        h("code", {}, "tag:<tag>"),
        ", ",
        h("code", {}, "<METHOD> <path>"),
        ", ",
        h("code", {}, "operationId:<id>"),
        " or a bare operationId. Empty: every operation, up to the daemon's tool limit.",
      ),
      label(inputs.openapiPrompt, "What the tools are for", true),
      inputs.openapiPrompt,
      help("reg-openapi-prompt-help", "A prompt. With an LLM configured, it chooses the operations and rewrites names and descriptions (never schemas or requests)."),
    ),
    toolset: h(
      "fieldset",
      { class: "mode-section", "data-mode": "toolset" },
      h("legend", { class: "visually-hidden" }, "Toolset JSON"),
      h(
        "div",
        { class: "label-row" },
        label(inputs.toolset, "Toolset as JSON"),
        h("button", { type: "button", class: "quiet small", onclick: insertExample }, "Insert an example"),
      ),
      inputs.toolset,
      h("div", { id: "reg-toolset-status", class: "json-status" }),
      help(
        "reg-toolset-help",
        "The body ",
        h("code", {}, "POST /admin/servers"),
        " takes: ",
        h("code", {}, '{"name", "tools": [{"name", "description", "input_schema", "handler"}], "allow_domains"}'),
        ". A handler is the body of ",
        h("code", {}, "async function (args, fetch)"),
        ": end it with ",
        h("code", {}, "return"),
        ". ",
        h("code", {}, "mcpbootd export <id>"),
        " prints one.",
      ),
    ),
  };

  // Fields of generated servers (prompt and OpenAPI).
  const generated = h(
    "fieldset",
    { class: "form-group generated-only" },
    h("legend", {}, "Server"),
    h(
      "div",
      { class: "two-columns" },
      h("div", {}, label(inputs.id, "Id", true), inputs.id, help("reg-id-help", "Lower-case letters, digits and dashes; derived from the name when empty.")),
      h("div", {}, label(inputs.name, "Name", true), inputs.name),
    ),
    label(inputs.description, "Description", true),
    inputs.description,
    help("reg-description-help", "What the server is for; MCP hosts get it as the server's instructions."),
    label(inputs.allowDomains, "Allowed domains", true),
    inputs.allowDomains,
    help("reg-allow-domains-help", "Domains the handlers may fetch besides those the prompt and its documents name; separated by commas or spaces."),
    label(inputs.approval, "New versions"),
    inputs.approval,
    help("reg-approval-help", "Whether each new version waits for an operator's approval before it is served."),
    h("label", { class: "inline", for: inputs.dryRun.id }, inputs.dryRun, "Dry run (plan only)"),
    help("reg-dry-run-help", "Stop after planning: the plan is stored, nothing is mounted (status planned)."),
  );

  const showToken = h("button", { type: "button", class: "quiet small", "aria-pressed": "false", "aria-controls": inputs.token.id }, "Show");
  showToken.addEventListener("click", () => revealToken(inputs.token.type === "password"));
  const generateToken = h("button", { type: "button", class: "quiet small", onclick: () => {
    inputs.token.value = randomToken();
    revealToken(true);
    inputs.token.focus();
    inputs.token.select();
  } }, "Generate");
  const shared = h(
    "fieldset",
    { class: "form-group" },
    h("legend", {}, "Access"),
    label(inputs.token, "Access token", true),
    h("div", { class: "input-row" }, inputs.token, showToken, generateToken),
    help(
      "reg-token-help",
      "The bearer token MCP clients must present on the server's mount: 16 to 512 printable characters without spaces. Keep a copy; the daemon stores only its hash.",
    ),
  );

  const submit = h("button", { type: "submit", class: "primary" }, "Register");
  const status = h("div", { id: "register-status", class: "register-status" });
  const form = h(
    "form",
    { class: "card register-form", id: "register-form", "aria-label": "Register a server", novalidate: true },
    modeSwitch,
    sections.prompt,
    sections.openapi,
    sections.toolset,
    generated,
    shared,
    h("div", { class: "actions" }, submit, h("a", { href: "#/servers", class: "button quiet" }, "Cancel")),
    status,
  );

  main.append(
    heading("Register a server"),
    h(
      "p",
      { class: "muted intro" },
      "Prompts and OpenAPI documents are generated in the background; you can follow each stage. A toolset is served at once. The command line does the same: ",
      h("code", {}, "mcpbootd register"),
      ".",
    ),
    form,
  );

  function revealToken(visible) {
    inputs.token.type = visible ? "text" : "password";
    showToken.textContent = visible ? "Hide" : "Show";
    showToken.setAttribute("aria-pressed", String(visible));
  }

  function setMode(next, { remember = true } = {}) {
    mode = next;
    for (const [name, section] of Object.entries(sections)) {
      section.hidden = name !== mode;
      section.disabled = name !== mode;
    }
    generated.hidden = mode === "toolset";
    generated.disabled = mode === "toolset";
    submit.textContent = mode === "toolset" ? "Register" : "Register and generate";
    status.replaceChildren();
    if (remember) history.replaceState(null, "", `#/register?mode=${mode}`);
  }

  modeSwitch.addEventListener("change", (event) => {
    if (event.target.name === "mode") setMode(event.target.value);
  });
  inputs.dryRun.addEventListener("change", () => {
    if (mode !== "toolset") submit.textContent = inputs.dryRun.checked ? "Plan (dry run)" : "Register and generate";
  });

  async function insertExample() {
    if (inputs.toolset.value.trim()) {
      const sure = await confirmDialog({ title: "Replace the JSON?", text: "The example replaces what is in the box.", confirm: "Replace" });
      if (!sure) return;
    }
    inputs.toolset.value = JSON.stringify(EXAMPLE_TOOLSET, null, 2);
    checkToolset();
    inputs.toolset.focus();
  }

  // Toolset JSON: parsed as you type (after a pause), with the error's line and column.
  const toolsetStatus = sections.toolset.querySelector("#reg-toolset-status");
  function checkToolset() {
    const result = parseToolset(inputs.toolset.value);
    if (result.empty) {
      inputs.toolset.removeAttribute("aria-invalid");
      toolsetStatus.replaceChildren();
    } else if (result.error) {
      inputs.toolset.setAttribute("aria-invalid", "true");
      replace(toolsetStatus, describeJsonError(result, inputs.toolset));
    } else {
      inputs.toolset.removeAttribute("aria-invalid");
      const names = result.value.tools.map((tool) => (tool && tool.name) || "?");
      replace(
        toolsetStatus,
        h("p", { class: "json-ok" }, `Valid JSON: ${names.length} ${names.length === 1 ? "tool" : "tools"} (${names.join(", ")})`),
      );
    }
    return result;
  }
  inputs.toolset.addEventListener("input", () => {
    clearTimeout(parseTimer);
    parseTimer = setTimeout(checkToolset, 400);
  });

  // Submitting.
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (submit.disabled) return;
    status.replaceChildren();
    let body;
    try {
      body = buildBody();
    } catch (problem) {
      replace(status, errorBox({ message: problem.message }, problem.hint));
      if (problem.field) problem.field.focus();
      return;
    }
    submit.disabled = true;
    submit.setAttribute("aria-busy", "true");
    replace(status, h("p", { class: "muted", role: "status" }, mode === "toolset" ? "Registering…" : "Starting the generation…"));
    try {
      const answer = await api.post("/admin/servers", body);
      if (answer && answer.generation_id !== undefined) {
        go(`/servers/${encodeURIComponent(answer.id)}/progress/${encodeURIComponent(answer.generation_id)}`, { from: main });
      } else {
        toast(`Registered ${answer.name || answer.id}: ${(answer.tools || []).length} tools served at ${answer.mcp_path}`, "ok");
        for (const warning of answer.warnings || []) toast(`Warning: ${warning}`);
        go(`/servers/${encodeURIComponent(answer.id)}`, { from: main });
      }
    } catch (error) {
      replace(status, errorBox(error, hintFor(error)));
      status.scrollIntoView({ block: "nearest" });
    } finally {
      submit.disabled = false;
      submit.removeAttribute("aria-busy");
    }
  });

  function buildBody() {
    const token = inputs.token.value.trim();
    if (token && !new RegExp(`^${TOKEN_PATTERN}$`).test(token)) {
      throw problem("The access token must be 16 to 512 printable characters, without spaces.", inputs.token);
    }
    if (mode === "toolset") {
      const result = checkToolset();
      if (result.empty) throw problem("Paste the toolset's JSON, or insert the example to start from.", inputs.toolset);
      if (result.error) throw problem(`The toolset is not valid JSON: ${result.summary}`, inputs.toolset);
      const body = result.value;
      if (token) body.access_token = token;
      return body;
    }
    const id = inputs.id.value.trim();
    if (id && !new RegExp(`^${ID_PATTERN}$`).test(id)) {
      throw problem("The id must start with a lower-case letter or digit and have only lower-case letters, digits and dashes (at most 63).", inputs.id);
    }
    const body = {};
    if (mode === "prompt") {
      const prompt = inputs.prompt.value.trim();
      if (!prompt) throw problem("Write the prompt: what the tools should do, with links to the API's documentation.", inputs.prompt);
      body.prompt = prompt;
    } else {
      const url = inputs.openapi.value.trim();
      const spec = inputs.openapiSpec.value.trim();
      if (url && spec) throw problem("Give the document's URL or paste the document, not both.", inputs.openapi);
      if (!url && !spec) throw problem("Give the URL of the OpenAPI document (or paste the document).", inputs.openapi);
      if (url) {
        if (!isHttpUrl(url)) throw problem("The document URL must be an http or https URL.", inputs.openapi);
        body.openapi = url;
      } else {
        body.openapi_spec = parseSpec(spec);
      }
      const baseUrl = inputs.baseUrl.value.trim();
      if (baseUrl) {
        if (!isHttpUrl(baseUrl)) throw problem("The base URL must be an http or https URL.", inputs.baseUrl);
        body.base_url = baseUrl;
      }
      const include = lines(inputs.include.value);
      const exclude = lines(inputs.exclude.value);
      if (include.length || exclude.length) body.operations = { include, exclude };
      const prompt = inputs.openapiPrompt.value.trim();
      if (prompt) body.prompt = prompt;
    }
    if (id) body.id = id;
    const name = inputs.name.value.trim();
    if (name) body.name = name;
    const description = inputs.description.value.trim();
    if (description) body.description = description;
    const domains = inputs.allowDomains.value.split(/[\s,]+/).filter(Boolean);
    if (domains.length) body.allow_domains = domains;
    if (inputs.dryRun.checked) body.dry_run = true;
    if (inputs.approval.value) body.require_approval = inputs.approval.value === "true";
    if (token) body.access_token = token;
    return body;
  }

  setMode(mode, { remember: false });
  return () => clearTimeout(parseTimer);
}

function problem(message, field, hint) {
  const error = new Error(message);
  error.field = field;
  error.hint = hint;
  return error;
}

function hintFor(error) {
  if (error.code === "llm_not_configured") return "Configure an [llm] provider in the daemon, or register an OpenAPI document or a toolset, which need none.";
  if (error.status === 0) return null;
  return "Fix the form and register again; nothing you typed was lost.";
}

function isHttpUrl(text) {
  try {
    const url = new URL(text);
    return url.protocol === "http:" || url.protocol === "https:";
  } catch {
    return false;
  }
}

function lines(text) {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter(Boolean);
}

/** A pasted document: JSON becomes an object; anything else (YAML) is sent as text. */
function parseSpec(text) {
  if (/^[[{]/.test(text)) {
    try {
      return JSON.parse(text);
    } catch {
      // Not JSON after all: the daemon reads it as YAML and says what is wrong.
    }
  }
  return text;
}

function randomToken() {
  const bytes = crypto.getRandomValues(new Uint8Array(24));
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * Parses a toolset body. `{empty}`, `{value}`, or `{error, summary, position, line, column}` for
 * text that is not JSON (the position from the engine's message, or the end for a cut-off text)
 * or JSON that is not a toolset.
 */
export function parseToolset(text) {
  if (!text.trim()) return { empty: true };
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    const message = String(error.message);
    let position = null;
    const at = message.match(/at position (\d+)/);
    if (at) position = Number(at[1]);
    else {
      const lineColumn = message.match(/line (\d+) column (\d+)/);
      if (lineColumn) position = offsetOf(text, Number(lineColumn[1]), Number(lineColumn[2]));
      else if (/end of (JSON )?input/i.test(message)) position = text.length;
    }
    const reason = message
      .replace(/^JSON\.parse: /, "")
      .replace(/,? ?"[\s\S]*" is not valid JSON$/, "")
      .replace(/ in JSON at position \d+( \(line \d+ column \d+\))?/, "")
      .replace(/ at line \d+ column \d+ of the JSON data/, "");
    if (position === null) return { error: true, summary: reason, reason };
    const { line, column } = lineColumnOf(text, position);
    return { error: true, reason, position, line, column, summary: `line ${line}, column ${column}: ${reason}` };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { error: true, reason: "the toolset must be a JSON object", summary: "the toolset must be a JSON object ({\"name\": …, \"tools\": […]})" };
  }
  if (!Array.isArray(value.tools) || value.tools.length === 0) {
    return { error: true, reason: "no tools", summary: "the object needs a \"tools\" array with at least one tool" };
  }
  return { value };
}

function lineColumnOf(text, position) {
  const before = text.slice(0, position);
  const line = before.split("\n").length;
  const column = position - before.lastIndexOf("\n");
  return { line, column };
}

function offsetOf(text, line, column) {
  const rows = text.split("\n");
  let offset = 0;
  for (let i = 0; i < line - 1 && i < rows.length; i += 1) offset += rows[i].length + 1;
  return Math.min(offset + column - 1, text.length);
}

/** The parse error, the line it is on with a marker under the column, and a way to get there. */
function describeJsonError(result, textarea) {
  const parts = [h("p", { class: "json-error" }, h("strong", {}, "Not valid yet: "), result.summary)];
  if (result.position !== undefined && result.position !== null) {
    const text = textarea.value;
    const start = text.lastIndexOf("\n", result.position - 1) + 1;
    let end = text.indexOf("\n", result.position);
    if (end < 0) end = text.length;
    const lineText = text.slice(start, end);
    const column = result.position - start;
    // Long lines are cut around the column.
    const from = Math.max(0, column - 60);
    const shown = (from > 0 ? "…" : "") + lineText.slice(from, column + 60) + (column + 60 < lineText.length ? "…" : "");
    const caret = " ".repeat(column - from + (from > 0 ? 1 : 0)) + "^";
    parts.push(h("pre", { class: "json-error-line", "aria-hidden": "true" }, `${shown}\n${caret}`));
    parts.push(
      h(
        "button",
        {
          type: "button",
          class: "quiet small",
          onclick: () => {
            textarea.focus();
            textarea.setSelectionRange(result.position, Math.min(result.position + 1, text.length));
          },
        },
        `Go to line ${result.line}, column ${result.column}`,
      ),
    );
  }
  return parts;
}
