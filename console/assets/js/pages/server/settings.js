// The server page's settings tab: credentials, connections, auth, access token, approval,
// code mode, export and deletion.

import * as api from "../../api.js";
import { actionButton, badge, confirmDialog, errorBox, h, replace, time, toast } from "../../dom.js";
import { go } from "../../main.js";
import { copyButton, isoFromMillis, words } from "../../server-ui.js";
import { authBadge, authOf, table } from "./common.js";

export function settingsTab(page) {
  return h(
    "div",
    { class: "sv-settings" },
    credentialsSection(page),
    connectionsSection(page),
    authSection(page),
    accessTokenSection(page),
    approvalSection(page),
    codeModeSection(page),
    exportSection(page),
    deleteSection(page),
  );
}

function section(id, title, ...body) {
  return h("section", { class: "card sv-setting", "aria-labelledby": id }, h("h3", { id, tabindex: "-1" }, title), ...body);
}

/** Each caller's connected account for the server's per-user credentials (never a token). */
function connectionsSection(page) {
  const list = page.data.connections;
  const perUser = (page.data.credentials?.credentials || []).filter((credential) => credential.per_user);
  if (!perUser.length && !(list && list.connections && list.connections.length)) return null;
  let listing;
  if (list && list.error) listing = errorBox(list.error);
  else if (!list || !list.connections.length) listing = h("p", { class: "muted" }, "Nobody has connected an account yet. A caller's first call sends them a link to connect theirs.");
  else
    listing = table(
      ["Credential", "Subject", "Scopes", "Connected", "Expires", "Last used", "Actions"],
      list.connections.map((connection) => [
        h("code", {}, connection.credential),
        connection.subject,
        connection.scopes ? h("code", {}, connection.scopes) : "—",
        time(isoFromMillis(connection.connected_at)),
        connection.expires_at ? time(isoFromMillis(connection.expires_at)) : "—",
        connection.last_used_at ? time(isoFromMillis(connection.last_used_at)) : "—",
        actionButton(
          "Delete",
          async () => {
            const ok = await confirmDialog({
              title: `Delete ${connection.subject}'s connection?`,
              text: "Their next call asks them to connect again. The token is revoked upstream where the credential names a revocation endpoint.",
              confirm: "Delete connection",
              danger: true,
            });
            if (!ok) return;
            await page.change(() => api.del(api.path`/admin/servers/${page.id}/connections/${connection.id}`, { signal: page.signal }));
            toast(`Connection of ${connection.subject} deleted.`, "ok");
            await page.reload({ focusId: "sv-conn-h" });
          },
          { "aria-label": `Delete the connection of ${connection.subject} for ${connection.credential}`, class: "quiet" },
        ),
      ]),
      "Connected accounts",
    );
  const element = section(
    "sv-conn-h",
    "Connected accounts",
    h("p", { class: "muted" }, "Callers' own accounts for the per-user credentials (", perUser.map((credential, index) => [index ? ", " : "", h("code", {}, credential.name)]), "). Subjects and times only; tokens are never shown."),
    listing,
  );
  element.classList.add("sv-wide");
  return element;
}

function injectionText(inject) {
  if (!inject) return "—";
  if (inject.header) return h("span", {}, "header ", h("code", {}, inject.header), ": ", h("code", {}, inject.format || "{value}"));
  if (inject.query) return h("span", {}, "query parameter ", h("code", {}, inject.query));
  if (inject.basic) return h("span", {}, "basic auth as ", h("code", {}, inject.basic.username ?? ""));
  return h("code", {}, JSON.stringify(inject));
}

function splitList(text) {
  return text
    .split(/[\s,]+/)
    .map((part) => part.trim())
    .filter(Boolean);
}

function credentialsSection(page) {
  const s = page.server;
  const list = page.data.credentials;
  const whitelist = (s.generation ? s.whitelist : s.latest_generation?.whitelist || []).map((entry) => entry.domain);
  const formStatus = h("div", { "aria-live": "polite" });
  const name = h("input", { id: "cred-name", required: true, pattern: "[A-Za-z0-9][A-Za-z0-9_\\-]{0,63}", autocomplete: "off", spellcheck: "false", "aria-describedby": "cred-name-hint" });
  const value = h("input", { id: "cred-value", type: "password", required: true, minlength: 8, autocomplete: "new-password", "aria-describedby": "cred-value-hint" });
  const domains = h("input", {
    id: "cred-domains",
    required: true,
    autocomplete: "off",
    spellcheck: "false",
    value: whitelist.length === 1 ? whitelist[0] : "",
    "aria-describedby": "cred-domains-hint",
  });
  const how = h(
    "select",
    { id: "cred-how" },
    h("option", { value: "header" }, "Header"),
    h("option", { value: "query" }, "Query parameter"),
    h("option", { value: "basic" }, "HTTP basic authentication"),
  );
  const header = h("input", { id: "cred-header", value: "Authorization", autocomplete: "off", spellcheck: "false" });
  const format = h("input", { id: "cred-format", value: "Bearer {value}", autocomplete: "off", spellcheck: "false", "aria-describedby": "cred-format-hint" });
  const query = h("input", { id: "cred-query", autocomplete: "off", spellcheck: "false" });
  const username = h("input", { id: "cred-username", autocomplete: "off", spellcheck: "false" });
  const groups = {
    header: h(
      "div",
      { class: "sv-pair" },
      h("div", {}, h("label", { for: "cred-header" }, "Header name"), header),
      h("div", {}, h("label", { for: "cred-format" }, "Header value"), format, h("p", { id: "cred-format-hint", class: "muted sv-hint" }, "{value} is replaced by the credential.")),
    ),
    query: h("div", {}, h("label", { for: "cred-query" }, "Query parameter name"), query),
    basic: h("div", {}, h("label", { for: "cred-username" }, "User name"), username, h("p", { class: "muted sv-hint" }, "The value is sent as the password.")),
  };
  const showGroup = () => {
    for (const [key, group] of Object.entries(groups)) {
      group.hidden = key !== how.value;
      for (const input of group.querySelectorAll("input")) input.required = key === how.value && input !== format && input !== username;
    }
  };
  how.addEventListener("change", showGroup);
  showGroup();
  const formHeading = h("h4", { id: "cred-form-h" }, "Set a credential");
  const submit = h("button", { type: "submit", class: "primary", id: "cred-submit" }, "Save credential");
  const form = h(
    "form",
    { class: "sv-form", "aria-labelledby": "cred-form-h" },
    formHeading,
    h(
      "div",
      { class: "sv-pair" },
      h("div", {}, h("label", { for: "cred-name" }, "Name"), name, h("p", { id: "cred-name-hint", class: "muted sv-hint" }, "Letters, digits, - and _. Setting an existing name rotates it.")),
      h("div", {}, h("label", { for: "cred-value" }, "Value"), value, h("p", { id: "cred-value-hint", class: "muted sv-hint" }, "At least 8 characters. Stored encrypted; never shown again.")),
    ),
    h("label", { for: "cred-domains" }, "Domains"),
    domains,
    h(
      "p",
      { id: "cred-domains-hint", class: "muted sv-hint" },
      "Hosts that get it (and their subdomains), separated by commas or spaces; each must be on the whitelist",
      whitelist.length ? `: ${whitelist.join(", ")}.` : " (this server has none yet).",
    ),
    h("label", { for: "cred-how" }, "Sent as"),
    how,
    Object.values(groups),
    h("div", { class: "actions" }, submit),
    formStatus,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(formStatus);
    const inject =
      how.value === "header"
        ? { header: header.value.trim(), format: format.value || "{value}" }
        : how.value === "query"
          ? { query: query.value.trim() }
          : { basic: { username: username.value } };
    const credentialName = name.value.trim();
    submit.disabled = true;
    try {
      const view = await page.change(() =>
        api.put(api.path`/admin/servers/${page.id}/credentials/${credentialName}`, { value: value.value, domains: splitList(domains.value), inject }, { signal: page.signal }),
      );
      value.value = "";
      toast(`Credential ${view.name} saved (fingerprint ${view.fingerprint}).`, "ok");
      await page.reload({ focusId: "cred-submit" });
    } catch (error) {
      if (error.name !== "AbortError") replace(formStatus, errorBox(error));
    } finally {
      submit.disabled = false;
    }
  });
  const rotate = (credential) => {
    formHeading.textContent = `Rotate credential ${credential.name}`;
    name.value = credential.name;
    domains.value = credential.domains.join(", ");
    const inject = credential.inject || {};
    how.value = inject.header ? "header" : inject.query ? "query" : "basic";
    if (inject.header) {
      header.value = inject.header;
      format.value = inject.format || "{value}";
    }
    if (inject.query) query.value = inject.query;
    if (inject.basic) username.value = inject.basic.username ?? "";
    showGroup();
    value.value = "";
    value.focus();
  };
  let listing;
  if (list && list.error) listing = errorBox(list.error);
  else if (!list || !list.credentials.length) listing = h("p", { class: "muted" }, "No credentials. Add one below when the upstream API needs a key; handlers never see its value.");
  else
    listing = table(
      ["Name", "Domains", "Sent as", "Fingerprint", "Created", "Rotated", "Actions"],
      list.credentials.map((credential) => [
        h("code", {}, credential.name),
        credential.domains.map((domain, index) => [index ? ", " : "", h("code", {}, domain)]),
        [injectionText(credential.inject), credential.per_user ? h("span", { class: "muted" }, ` — each caller's own (${credential.per_user.kind})`) : null],
        h("code", {}, credential.fingerprint),
        time(isoFromMillis(credential.created_at)),
        time(isoFromMillis(credential.rotated_at)),
        h(
          "div",
          { class: "sv-row-actions" },
          h("button", { type: "button", onclick: () => rotate(credential), "aria-label": `Rotate credential ${credential.name}` }, "Rotate"),
          actionButton(
            "Delete",
            async () => {
              const ok = await confirmDialog({
                title: `Delete credential ${credential.name}?`,
                text: "The next call goes without it; calls in flight keep the value they started with.",
                confirm: "Delete credential",
                danger: true,
              });
              if (!ok) return;
              await page.change(() => api.del(api.path`/admin/servers/${page.id}/credentials/${credential.name}`, { signal: page.signal }));
              toast(`Credential ${credential.name} deleted.`, "ok");
              await page.reload({ focusId: "sv-cred-h" });
            },
            { "aria-label": `Delete credential ${credential.name}`, class: "quiet" },
          ),
        ),
      ]),
      "Credentials",
    );
  const element = section(
    "sv-cred-h",
    "Credentials",
    h("p", { class: "muted" }, "Keys for upstream APIs, added by the daemon to matching requests. Only names, domains and fingerprints are shown; values never are."),
    listing,
    form,
  );
  element.classList.add("sv-wide");
  return element;
}

function randomToken() {
  const raw = crypto.getRandomValues(new Uint8Array(32));
  const text = btoa(String.fromCharCode(...raw)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  return `mcp_${text}`;
}

/** The mode in force in words: "OAuth sign-in (with the scopes billing) (daemon default)". */
function authWords(auth) {
  const name = { open: "Open", access_token: "Static access token", oauth: "OAuth sign-in" }[auth.mode] || words(auth.mode);
  const scopes = auth.scopes || [];
  return [
    h("strong", { id: "auth-mode" }, name),
    scopes.length ? [` with the extra ${scopes.length === 1 ? "scope" : "scopes"} `, scopes.map((scope, index) => [index ? ", " : "", h("code", {}, scope)])] : null,
    auth.source === "default" ? h("span", { class: "muted" }, " (daemon default)") : null,
  ];
}

function authMeaning(auth) {
  switch (auth.mode) {
    case "open":
      return "Anyone who can reach the MCP URL can call this server's tools.";
    case "access_token":
      return "MCP clients must present this server's access token (see Access token).";
    case "oauth":
      return "MCP clients must sign in with the daemon's identity provider ([auth.oauth]) and send an OAuth token holding the daemon's scopes and these.";
    default:
      return "";
  }
}

/** Who may connect to the mount: the mode in force, and the daemon default, open or OAuth. */
function authSection(page) {
  const s = page.server;
  const auth = authOf(s);
  const current = auth.source === "default" ? "default" : auth.mode === "open" || auth.mode === "oauth" ? auth.mode : null;
  const choices = [
    ["default", "Daemon default", "The daemon's [auth.oauth] required decides: OAuth sign-in when it is on, open otherwise. A static access token stays in force."],
    ["open", "Open", "No sign-in: anyone who can reach the MCP URL."],
    ["oauth", "OAuth sign-in", "An OAuth token from the daemon's identity provider. Needs [auth.oauth] in the daemon's configuration."],
  ];
  const radios = choices.map(([value, label, hint]) => ({
    value,
    input: h("input", {
      type: "radio",
      name: "auth-mode",
      id: `auth-${value}`,
      value,
      required: true,
      checked: current === value,
      "aria-describedby": `auth-${value}-hint`,
    }),
    label,
    hint: h("span", { id: `auth-${value}-hint`, class: "muted sv-hint sv-radio-hint" }, hint),
  }));
  const scopes = h("input", {
    id: "auth-scopes",
    type: "text",
    autocomplete: "off",
    spellcheck: "false",
    value: (auth.mode === "oauth" ? auth.scopes || [] : []).join(" "),
    "aria-describedby": "auth-scopes-hint",
    disabled: current !== "oauth",
  });
  const chosen = () => radios.find(({ input }) => input.checked)?.value ?? null;
  for (const { input } of radios) input.addEventListener("change", () => (scopes.disabled = chosen() !== "oauth"));
  const status = h("div", { "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary", id: "auth-submit" }, "Apply");
  const form = h(
    "form",
    { class: "sv-form", "aria-labelledby": "sv-auth-h" },
    h(
      "fieldset",
      { class: "sv-checks" },
      h("legend", {}, "Change it to"),
      radios.map(({ input, label, hint }) => h("div", { class: "sv-auth-choice" }, h("label", { class: "inline sv-radio", for: input.id }, input, label), hint)),
      h(
        "div",
        { class: "sv-auth-scopes" },
        h("label", { for: "auth-scopes" }, "Extra scopes for OAuth (optional)"),
        scopes,
        h("p", { id: "auth-scopes-hint", class: "muted sv-hint" }, "Scopes a token needs on this server besides the daemon's, separated by spaces or commas; at most 16."),
      ),
    ),
    h("div", { class: "actions" }, submit),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status);
    const choice = chosen();
    if (!choice) return;
    const question = authQuestion(s, auth, choice);
    if (question && !(await confirmDialog(question))) return;
    submit.disabled = true;
    try {
      const answer = await page.change(() =>
        choice === "default"
          ? api.del(api.path`/admin/servers/${page.id}/auth`, { signal: page.signal })
          : api.put(
              api.path`/admin/servers/${page.id}/auth`,
              choice === "open" ? { mode: "open" } : { mode: "oauth", scopes: splitList(scopes.value) },
              { signal: page.signal },
            ),
      );
      const mode = { open: "open", access_token: "static access token", oauth: "OAuth sign-in" }[answer.auth.mode] || answer.auth.mode;
      toast(`Who may connect to ${page.id}: ${mode}${answer.auth.source === "default" ? " (daemon default)" : ""}${answer.access_token_removed ? "; the access token was removed" : ""}.`, "ok");
      await page.reload({ focusId: "auth-submit" });
    } catch (error) {
      if (error.name !== "AbortError") replace(status, errorBox(error, error.code === "invalid_auth" ? "Nothing was changed." : null));
    } finally {
      submit.disabled = false;
    }
  });
  const element = section(
    "sv-auth-h",
    "Who may connect",
    h("p", { class: "sv-auth-now" }, authWords(auth)),
    h("p", { class: "muted" }, authMeaning(auth)),
    form,
  );
  element.id = "sv-auth";
  return element;
}

/** The confirmation a change of mode needs, or null: it removes the static access token, or it
 * may open a mount that required a token or a sign-in. */
function authQuestion(server, auth, choice) {
  if (server.access_token_set && choice === "open") {
    return {
      title: "Remove the access token and open the server?",
      text: "The static access token is deleted, and anyone who can reach the MCP URL can then call this server's tools.",
      confirm: "Remove token and open",
      danger: true,
    };
  }
  if (server.access_token_set && choice === "oauth") {
    return {
      title: "Replace the access token with OAuth?",
      text: "The static access token is deleted: MCP clients that send it are refused until they sign in with OAuth.",
      confirm: "Remove token and use OAuth",
      danger: true,
    };
  }
  if (choice === "open" && auth.mode !== "open") {
    return {
      title: "Open the server to anyone?",
      text: "Anyone who can reach the MCP URL can then call this server's tools without signing in.",
      confirm: "Open the server",
      danger: true,
    };
  }
  if (choice === "default" && !server.access_token_set && auth.mode !== "open" && auth.source === "server") {
    return {
      title: "Let the daemon's default decide?",
      text: "Unless the daemon's [auth.oauth] required is on, anyone who can reach the MCP URL can then call this server's tools.",
      confirm: "Use the daemon default",
      danger: true,
    };
  }
  return null;
}

function accessTokenSection(page) {
  const s = page.server;
  const input = h("input", {
    id: "token-value",
    type: "password",
    autocomplete: "new-password",
    spellcheck: "false",
    required: true,
    minlength: 16,
    maxlength: 512,
    pattern: "[!-~]{16,512}",
    "aria-describedby": "token-hint",
  });
  const once = h("div", { "aria-live": "polite" });
  const status = h("div", { "aria-live": "polite" });
  const generate = h(
    "button",
    {
      type: "button",
      id: "token-generate",
      onclick: () => {
        input.value = randomToken();
        input.type = "text";
        input.focus();
        input.select();
      },
    },
    "Generate a random token",
  );
  const submit = h("button", { type: "submit", class: "primary", id: "token-submit" }, s.access_token_set ? "Rotate token" : "Set token");
  const form = h(
    "form",
    { class: "sv-form", "aria-labelledby": "sv-token-h" },
    h("label", { for: "token-value" }, s.access_token_set ? "New access token" : "Access token"),
    h("div", { class: "sv-input-row" }, input, generate),
    h(
      "p",
      { id: "token-hint", class: "muted sv-hint" },
      "16 to 512 printable characters without spaces. MCP clients send it as Authorization: Bearer <token>; the old one stops working at once. A token replaces the choice under Who may connect.",
    ),
    h(
      "div",
      { class: "actions" },
      submit,
      s.access_token_set
        ? actionButton(
            "Remove token",
            async () => {
              const ok = await confirmDialog({
                title: "Remove the access token?",
                text: "The daemon's default then decides who may connect: unless its [auth.oauth] required is on, anyone who can reach the MCP URL can call this server's tools.",
                confirm: "Remove token",
                danger: true,
              });
              if (!ok) return;
              await page.change(() => api.del(api.path`/admin/servers/${page.id}/access-token`, { signal: page.signal }));
              toast("Access token removed.", "ok");
              await page.reload({ focusId: "token-value" });
            },
            { id: "token-remove", class: "quiet" },
          )
        : null,
    ),
    status,
    once,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status);
    const token = input.value;
    submit.disabled = true;
    try {
      await page.change(() => api.put(api.path`/admin/servers/${page.id}/access-token`, { access_token: token }, { signal: page.signal }));
      input.value = "";
      input.type = "password";
      page.server.access_token_set = true;
      page.server.auth = { mode: "access_token", source: "server" };
      submit.textContent = "Rotate token";
      // Setting a token replaced the auth setting: the sections that show it say so at once.
      document.getElementById("sv-auth")?.replaceWith(authSection(page));
      document.getElementById("sv-auth-badge")?.replaceWith(authBadge(authOf(page.server)));
      replace(tokenState, tokenStateText(page.server));
      replace(
        once,
        h(
          "div",
          { class: "sv-once", role: "status" },
          h("p", {}, h("strong", {}, "Token set. "), "Copy it now: it is not shown again."),
          h("div", { class: "sv-input-row" }, h("code", { class: "sv-token", id: "token-once" }, token), copyButton(token, "access token")),
        ),
      );
      toast("Access token set.", "ok");
    } catch (error) {
      if (error.name !== "AbortError") replace(status, errorBox(error));
    } finally {
      submit.disabled = false;
    }
  });
  const tokenState = h("p", { id: "token-state" }, tokenStateText(s));
  return section("sv-token-h", "Access token", tokenState, form);
}

function tokenStateText(server) {
  if (server.access_token_set) return [badge("set", "ok"), " MCP clients must present this server's access token."];
  const auth = authOf(server);
  if (auth.mode === "oauth") return [badge("not set", "plain"), " MCP clients sign in with OAuth instead (see Who may connect)."];
  return [badge("not set", "warning"), " Anyone who can reach the MCP URL can call this server's tools."];
}

function codeModeSection(page) {
  const s = page.server;
  const settings = s.code_mode || { enabled: false, allowed_servers: [] };
  const servers = page.data.servers && !page.data.servers.error ? page.data.servers.servers.filter((other) => other.id !== s.id) : null;
  const enabled = h("input", { type: "checkbox", id: "cm-enabled", checked: Boolean(settings.enabled) });
  const allowed = new Set(settings.allowed_servers || []);
  let allowedControl;
  let readAllowed;
  if (servers && servers.length) {
    const ids = [...new Set([...servers.map((other) => other.id), ...allowed])];
    const boxes = ids.map((other) => h("input", { type: "checkbox", id: `cm-allow-${other}`, value: other, checked: allowed.has(other) }));
    allowedControl = h(
      "fieldset",
      { class: "sv-checks" },
      h("legend", {}, "Other servers its scripts may call"),
      boxes.map((box) => h("label", { class: "inline", for: box.id }, box, h("code", {}, box.value))),
      h("p", { class: "muted sv-hint" }, "A grant: this server's MCP clients can use those servers' tools without their access tokens."),
    );
    readAllowed = () => boxes.filter((box) => box.checked).map((box) => box.value);
  } else {
    const input = h("input", { id: "cm-allowed", value: [...allowed].join(", "), autocomplete: "off", spellcheck: "false", "aria-describedby": "cm-allowed-hint" });
    allowedControl = h(
      "div",
      {},
      h("label", { for: "cm-allowed" }, "Other servers its scripts may call"),
      input,
      h("p", { id: "cm-allowed-hint", class: "muted sv-hint" }, "Server ids, separated by commas. A grant: this server's MCP clients can use their tools without their access tokens."),
    );
    readAllowed = () => splitList(input.value);
  }
  const limits = [
    ["timeout_ms", "Script timeout (ms)", 1, 900000],
    ["max_tool_calls", "Tool calls per script", 0, null],
    ["max_concurrent_tool_calls", "Concurrent tool calls", 1, null],
    ["max_tool_result_bytes", "Largest tool result (bytes)", 1, null],
  ].map(([key, label, min, max]) => ({
    key,
    input: h("input", { type: "number", id: `cm-${key}`, min, max, step: 1, value: settings[key] ?? "", placeholder: "daemon default", inputmode: "numeric" }),
    label,
  }));
  const status = h("div", { "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary", id: "cm-submit" }, "Save code mode");
  const form = h(
    "form",
    { class: "sv-form", "aria-labelledby": "sv-cm-h" },
    h("label", { class: "inline", for: "cm-enabled" }, enabled, "List the code_execution tool on this server's mount"),
    h("p", { class: "muted sv-hint" }, "Needs [code_mode] enabled in the daemon's configuration too."),
    allowedControl,
    h("div", { class: "sv-limits" }, limits.map(({ key, input, label }) => h("div", {}, h("label", { for: `cm-${key}` }, label), input))),
    h("p", { class: "muted sv-hint" }, "Empty limits follow the daemon's [code_mode] defaults."),
    h("div", { class: "actions" }, submit),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status);
    const body = { enabled: enabled.checked, allowed_servers: readAllowed() };
    for (const { key, input } of limits) if (input.value !== "") body[key] = Number(input.value);
    submit.disabled = true;
    try {
      await page.change(() => api.put(api.path`/admin/servers/${page.id}/code-mode`, body, { signal: page.signal }));
      toast(`Code mode ${body.enabled ? "on" : "off"} for ${page.id}.`, "ok");
      await page.reload({ focusId: "cm-submit" });
    } catch (error) {
      if (error.name !== "AbortError") replace(status, errorBox(error));
    } finally {
      submit.disabled = false;
    }
  });
  const element = section("sv-cm-h", "Code mode", form);
  element.classList.add("sv-wide");
  return element;
}

function approvalSection(page) {
  const current = page.server.require_approval;
  const choices = [
    ["default", null, "Follow the daemon's setting ([generation] require_approval)"],
    ["always", true, "Every new version waits for an operator's approval"],
    ["never", false, "New versions are served when they are ready"],
  ];
  const radios = choices.map(([key, value, label]) => ({
    value,
    input: h("input", { type: "radio", name: "approval", id: `approval-${key}`, value: key, checked: current === value }),
    label,
  }));
  const status = h("div", { "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary", id: "approval-submit" }, "Save approval setting");
  const form = h(
    "form",
    { class: "sv-form" },
    h(
      "fieldset",
      { class: "sv-checks" },
      h("legend", {}, "New versions"),
      radios.map(({ input, label }) => h("label", { class: "inline sv-radio", for: input.id }, input, label)),
    ),
    h("div", { class: "actions" }, submit),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status);
    const chosen = radios.find(({ input }) => input.checked);
    submit.disabled = true;
    try {
      await page.change(() => api.put(api.path`/admin/servers/${page.id}/approval`, { require_approval: chosen.value }, { signal: page.signal }));
      toast("Approval setting saved.", "ok");
      await page.reload({ focusId: "approval-submit" });
    } catch (error) {
      if (error.name !== "AbortError") replace(status, errorBox(error));
    } finally {
      submit.disabled = false;
    }
  });
  return section("sv-approval-h", "Approval", form);
}

function exportSection(page) {
  const button = actionButton(
    "Download toolset JSON",
    async () => {
      const body = await api.get(api.path`/admin/servers/${page.id}/export`, { signal: page.signal });
      const blob = new Blob([`${JSON.stringify(body, null, 2)}\n`], { type: "application/json" });
      const url = URL.createObjectURL(blob);
      const link = h("a", { href: url, download: `${page.id}.json`, class: "sv-offscreen" }, "download");
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
      toast(`Downloaded ${page.id}.json.`, "ok");
    },
    { id: "export-download" },
  );
  return section(
    "sv-export-h",
    "Export",
    h("p", { class: "muted" }, "The served version as a toolset registration body (POST /admin/servers accepts it): tools with their handlers and the whitelist; never credential values or the access token."),
    h("div", { class: "actions" }, button),
  );
}

function deleteSection(page) {
  const button = actionButton(
    "Delete server",
    async () => {
      const ok = await confirmDialog({
        title: `Delete server ${page.id}?`,
        text: "Its mount, versions and credentials are deleted with it. This cannot be undone.",
        confirm: "Delete server",
        danger: true,
        typed: page.id,
      });
      if (!ok) return;
      await page.change(() => api.del(api.path`/admin/servers/${page.id}`, { signal: page.signal }));
      toast(`Server ${page.id} deleted.`, "ok");
      go("/servers");
    },
    { class: "danger", id: "server-delete" },
  );
  return h(
    "section",
    { class: "card sv-setting sv-danger", "aria-labelledby": "sv-delete-h" },
    h("h3", { id: "sv-delete-h" }, "Delete server"),
    h("p", {}, "Unmounts the server and deletes it from the catalog. You will be asked to type its id."),
    h("div", { class: "actions" }, button),
  );
}
