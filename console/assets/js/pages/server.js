// One server (`#/servers/:id`, `#/servers/:id/:tab`): its header (status, MCP URL, flags) and
// the tabs tools, whitelist, documents, versions and settings. The page follows the daemon's
// event stream and redraws when this server changes (or offers to, while a form is in use).

import * as api from "../api.js";
import {
  actionButton,
  badge,
  bytes,
  confirmDialog,
  emptyState,
  errorBox,
  h,
  heading,
  number,
  replace,
  time,
  toast,
} from "../dom.js";
import { go } from "../main.js";
import {
  annotationBadges,
  breadcrumbs,
  copyButton,
  healthSummary,
  isFinal,
  isoFromMillis,
  outboundLink,
  reasonDialog,
  selfTestBadge,
  serverHref,
  words,
} from "../server-ui.js";

const TABS = [
  ["tools", "Tools"],
  ["whitelist", "Whitelist"],
  ["documents", "Documents"],
  ["versions", "Versions"],
  ["settings", "Settings"],
];

export async function render(main, params) {
  const id = params.id;
  const tab = params.tab || "tools";
  if (!TABS.some(([key]) => key === tab)) {
    main.append(
      breadcrumbs([["Servers", "#/servers"], [id, serverHref(id)], [tab]]),
      heading(id),
      errorBox({ message: `A server page has no "${tab}" section.` }, `The sections are ${TABS.map(([, label]) => label).join(", ")}.`),
      h("p", {}, h("a", { href: serverHref(id) }, "Back to the server")),
    );
    return;
  }
  const controller = new AbortController();
  const page = new ServerPage(main, id, tab, controller.signal);
  if (await page.load()) page.follow();
  return () => controller.abort();
}

class ServerPage {
  constructor(main, id, tab, signal) {
    this.main = main;
    this.id = id;
    this.tab = tab;
    this.signal = signal;
    this.server = null;
    this.data = {};
    this.busy = 0;
    this.notice = h("div", { class: "sv-live", "aria-live": "polite" });
    // The documents tab's chosen version (null: the served one).
    this.documentsVersion = null;
  }

  /** Fetches the server and what the tab needs, then draws; false when the server is gone. */
  async load() {
    const { id, signal } = this;
    const extra = {
      versions: this.tab === "versions" || this.tab === "documents" ? api.get(api.path`/admin/servers/${id}/versions`, { signal }) : null,
      credentials: this.tab === "settings" ? api.get(api.path`/admin/servers/${id}/credentials`, { signal }) : null,
      connections: this.tab === "settings" ? api.get(api.path`/admin/servers/${id}/connections`, { signal }) : null,
      servers: this.tab === "settings" ? api.get("/admin/servers", { signal }) : null,
    };
    let server;
    try {
      server = await api.get(api.path`/admin/servers/${id}`, { signal });
    } catch (error) {
      if (error.name === "AbortError") return false;
      const hint = error.status === 404 ? "It may have been deleted. The server list shows those there are." : null;
      replace(
        this.main,
        breadcrumbs([["Servers", "#/servers"], [id]]),
        heading(id),
        errorBox(error, hint),
        h("p", {}, h("a", { href: "#/servers" }, "All servers")),
      );
      return false;
    }
    const data = {};
    for (const [key, promise] of Object.entries(extra)) {
      if (!promise) continue;
      try {
        data[key] = await promise;
      } catch (error) {
        if (error.name === "AbortError") return false;
        data[key] = { error };
      }
    }
    if (this.tab === "documents") data.documents = await this.documentsOf(server);
    if (signal.aborted) return false;
    this.server = server;
    this.data = data;
    this.draw();
    return true;
  }

  /** Redraws after a change, keeping the focus on the control with the same id. */
  async reload({ focusId } = {}) {
    // A button that ran the change was disabled meanwhile, so the focus may have left it:
    // `focusId` names it.
    const active = document.activeElement;
    const hadFocus = Boolean(focusId) || Boolean(active && active !== this.main && this.main.contains(active));
    const focused = focusId || (hadFocus ? active.id : null);
    const scroll = window.scrollY;
    await this.load();
    window.scrollTo(0, scroll);
    if (!hadFocus) return;
    // A control that went away with the change (an Approve button) leaves the focus on the tab's heading.
    ((focused && document.getElementById(focused)) || document.getElementById("sv-panel-h"))?.focus({ preventScroll: true });
  }

  /** Redraws when the daemon says this server changed; asks first while a form is being used. */
  follow() {
    let timer = null;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.changedElsewhere(), 400);
    };
    const run = async () => {
      while (!this.signal.aborted) {
        try {
          await api.events(
            "/admin/events",
            (name, data) => {
              if (name === "lagged" || (data && typeof data === "object" && data.id === this.id)) changed();
            },
            this.signal,
          );
        } catch {
          // Live updates are a convenience; try again in a while.
        }
        if (this.signal.aborted) return;
        await new Promise((resolve) => setTimeout(resolve, 10000));
      }
    };
    run();
  }

  changedElsewhere() {
    if (this.signal.aborted || this.busy) return;
    const active = document.activeElement;
    const editing =
      this.tab === "settings" ||
      document.querySelector("dialog[open]") ||
      (active && this.main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName));
    if (!editing) {
      this.reload();
      return;
    }
    replace(
      this.notice,
      h(
        "div",
        { class: "notice sv-changed" },
        h("span", {}, "This server changed since the page was drawn. "),
        h("button", { type: "button", id: "sv-reload", onclick: () => this.reload() }, "Reload"),
      ),
    );
  }

  /** Runs `action` (an API change) with the live redraw held off; the caller redraws after it. */
  async change(action) {
    this.busy += 1;
    try {
      return await action();
    } finally {
      this.busy -= 1;
    }
  }

  draw() {
    const s = this.server;
    document.title = `${s.name} · mcpbootd console`;
    replace(this.notice);
    replace(this.main, this.header(), this.notice, this.notices(), this.tabs(), this.panel());
  }

  // Header.

  header() {
    const s = this.server;
    const latest = s.latest_generation;
    const running = latest && !isFinal(latest.status);
    const mcpUrl = location.origin + s.mcp_path;
    const degraded = s.tools.filter((tool) => tool.health && tool.health.degraded).length;
    const flags = [
      badge(s.status),
      s.serving ? badge("serving", "ok") : badge("not serving", "failed"),
      degraded ? badge(`${degraded} degraded ${degraded === 1 ? "tool" : "tools"}`, "degraded") : null,
      s.drift ? driftBadge(s.drift) : null,
      authBadge(authOf(s)),
      s.code_mode && s.code_mode.enabled ? badge("code mode on", "info") : null,
      s.require_approval === true ? badge("approval required", "info") : null,
    ];
    const links = h(
      "div",
      { class: "sv-head-links" },
      running
        ? h("a", { class: "sv-button-link primary", href: serverHref(s.id, "progress", latest.id) }, "Follow generation")
        : null,
      h("a", { class: "sv-button-link", href: serverHref(s.id, "calls") }, "Call log"),
    );
    const version = s.generation ? `version ${s.generation.version}` : null;
    return [
      breadcrumbs([["Servers", "#/servers"], [s.name]]),
      heading(s.name, links),
      h(
        "div",
        { class: "card sv-header" },
        h(
          "dl",
          { class: "facts" },
          h("dt", {}, "ID"),
          h("dd", {}, h("code", {}, s.id)),
          h("dt", {}, "Kind"),
          h("dd", {}, kindText(s.kind), version ? h("span", { class: "muted" }, ` · serving ${version}`) : null),
          h("dt", {}, "MCP URL"),
          h("dd", { class: "sv-mcp" }, h("code", { id: "sv-mcp-url" }, mcpUrl), " ", copyButton(mcpUrl, "MCP URL")),
          h("dt", {}, "State"),
          h("dd", { class: "sv-badges" }, flags),
          h("dt", {}, "Created"),
          h("dd", {}, time(s.created_at, { withAbsolute: true })),
          h("dt", {}, "Updated"),
          h("dd", {}, time(s.updated_at, { withAbsolute: true })),
          s.openapi && s.openapi.url ? [h("dt", {}, "API description"), h("dd", {}, outboundLink(s.openapi.url))] : null,
          s.openapi && s.openapi.base_url ? [h("dt", {}, "Base URL"), h("dd", {}, h("code", {}, s.openapi.base_url))] : null,
        ),
        s.description ? h("p", { class: "sv-description" }, s.description) : null,
        s.prompt
          ? h("details", { class: "sv-prompt" }, h("summary", {}, "Prompt"), h("pre", { class: "sv-text" }, s.prompt))
          : null,
      ),
    ];
  }

  /** What the newest generation means for the server, when it is not the served one. */
  notices() {
    const s = this.server;
    const latest = s.latest_generation;
    const out = [];
    if (latest) {
      const v = `Version ${latest.version}`;
      if (!isFinal(latest.status)) {
        out.push(
          h(
            "p",
            { class: "notice" },
            `${v} is being generated (${words(latest.status)}). `,
            h("a", { href: serverHref(s.id, "progress", latest.id) }, "Follow it"),
          ),
        );
      } else if (latest.status === "failed") {
        out.push(
          h(
            "div",
            { class: "error-box", role: "status" },
            h("strong", {}, `${v} failed`),
            latest.error ? h("p", { class: "sv-pre" }, latest.error) : null,
            h("p", {}, s.serving ? "The server keeps serving the active version. " : "", h("a", { href: serverHref(s.id, "versions") }, "Versions")),
          ),
        );
      } else if (latest.status === "awaiting_approval") {
        out.push(
          h("p", { class: "notice" }, `${v} awaits approval. `, h("a", { href: serverHref(s.id, "versions") }, "Review it on the Versions tab")),
        );
      } else if (latest.status === "planned") {
        out.push(h("p", { class: "notice" }, `${v} is a dry run's plan: nothing was mounted for it.`));
      } else if (latest.status === "rejected" && !s.serving) {
        out.push(h("p", { class: "notice" }, `${v} was rejected and nothing is served. Regenerate from the Versions tab.`));
      }
    }
    return out;
  }

  tabs() {
    return h(
      "nav",
      { class: "sv-tabs", "aria-label": "Server sections" },
      h(
        "ul",
        {},
        TABS.map(([key, label]) =>
          h("li", {}, h("a", { href: serverHref(this.id, key), "aria-current": key === this.tab ? "page" : null, id: `sv-tab-${key}` }, label)),
        ),
      ),
    );
  }

  panel() {
    const label = TABS.find(([key]) => key === this.tab)[1];
    const body = {
      tools: () => this.toolsTab(),
      whitelist: () => this.whitelistTab(),
      documents: () => this.documentsTab(),
      versions: () => this.versionsTab(),
      settings: () => this.settingsTab(),
    }[this.tab]();
    return h("section", { class: "sv-panel", "aria-labelledby": "sv-panel-h" }, h("h2", { id: "sv-panel-h", class: "sv-panel-h", tabindex: "-1" }, label), body);
  }

  // Tools.

  toolsTab() {
    const s = this.server;
    if (!s.tools.length) {
      const latest = s.latest_generation;
      let text = "This server serves no tools.";
      let action = null;
      if (latest && !isFinal(latest.status)) {
        text = `Version ${latest.version} is being generated; its tools appear here once it is ready.`;
        action = h("a", { href: serverHref(s.id, "progress", latest.id) }, "Follow the generation");
      } else if (latest && latest.status === "awaiting_approval") {
        text = `Version ${latest.version} awaits approval; its tools are served once an operator approves it.`;
        action = h("a", { href: serverHref(s.id, "versions") }, "Review it on the Versions tab");
      } else if (s.kind !== "toolset") {
        text = "No version is served. Regenerate the server to make one.";
        action = h("a", { href: serverHref(s.id, "versions") }, "Go to Versions");
      }
      return emptyState("No tools served", text, action);
    }
    const repairable = s.kind === "prompt";
    const warnings = (s.generation && s.generation.warnings) || [];
    return [
      h("p", { class: "muted" }, `${s.tools.length} ${s.tools.length === 1 ? "tool" : "tools"}${s.generation ? ` in version ${s.generation.version}` : ""}. Open one to see its schemas and handler and to call it.`),
      warnings.length
        ? h(
            "details",
            { class: "sv-warnings" },
            h("summary", {}, `${warnings.length} ${warnings.length === 1 ? "warning" : "warnings"} from the generation`),
            h("ul", {}, warnings.map((warning) => h("li", {}, warning))),
          )
        : null,
      h(
        "ul",
        { class: "sv-tool-list" },
        s.tools.map((tool) =>
          h(
            "li",
            { class: "card sv-tool" },
            h(
              "h3",
              { class: "sv-tool-name" },
              h("a", { href: serverHref(s.id, "tools", tool.name) }, h("code", {}, tool.name)),
              tool.title ? h("span", { class: "sv-tool-title muted" }, tool.title) : null,
            ),
            h("p", { class: "sv-tool-description" }, tool.description),
            h(
              "div",
              { class: "sv-badges" },
              annotationBadges(tool.annotations),
              selfTestBadge(tool.self_test),
              tool.needs_network === true ? badge("uses the network", "info") : null,
            ),
            tool.health ? h("p", { class: "sv-tool-health" }, healthSummary(tool.health)) : null,
            repairable && tool.health && tool.health.degraded
              ? h(
                  "div",
                  { class: "actions" },
                  actionButton(`Repair ${tool.name}`, (button) => this.repair(tool.name, button), { id: `sv-repair-${tool.name}` }),
                  h("span", { class: "muted" }, "Writes this tool's handler again from its recent failed calls; the result is a new version."),
                )
              : null,
          ),
        ),
      ),
    ];
  }

  async repair(tool) {
    const started = await this.change(() =>
      api.post(api.path`/admin/servers/${this.id}/regenerate`, { tools: [tool], with_failures: true }, { signal: this.signal }),
    );
    toast(`Repairing ${tool}: version being generated.`, "ok");
    go(`/servers/${encodeURIComponent(this.id)}/progress/${started.generation_id}`);
  }

  // Whitelist.

  whitelistTab() {
    const s = this.server;
    const generation = s.generation || s.latest_generation;
    const whitelist = s.generation ? s.whitelist : generation ? generation.whitelist : [];
    const out = [
      h(
        "p",
        { class: "muted" },
        "Handlers may fetch these domains and their subdomains, nothing else.",
        generation ? ` From version ${generation.version}${s.generation ? " (served)" : ` (${words(generation.status)})`}.` : "",
      ),
    ];
    if (!whitelist.length) {
      out.push(
        emptyState(
          "No domains",
          "This server's handlers cannot reach the network. Domains come from the registration's allow_domains, the prompt's URLs, documents the plan uses, or the API description's servers.",
        ),
      );
    } else {
      out.push(
        table(
          ["Domain", "Source", "Detail"],
          whitelist.map((entry) => [
            h("code", {}, entry.domain),
            [badge(entry.source, "info"), " ", h("span", { class: "muted sv-small" }, SOURCES[entry.source] || "")],
            entry.detail ? h("span", { class: "sv-wrap" }, entry.detail) : h("span", { class: "muted" }, "—"),
          ]),
          "Whitelisted domains",
        ),
      );
    }
    out.push(h("h3", { id: "sv-refused-h" }, "Refused candidates"));
    const groups = [];
    if (s.generation) groups.push(s.generation);
    if (s.latest_generation && (!s.generation || s.latest_generation.id !== s.generation.id)) groups.push(s.latest_generation);
    const withRefusals = groups.filter((g) => g.refused_domains && g.refused_domains.length);
    if (!withRefusals.length) {
      out.push(h("p", { class: "muted" }, "No candidate domain was refused."));
    } else {
      out.push(h("p", { class: "muted" }, "Hosts found in the prompt, documents or API description that were not admitted, and why."));
      for (const g of withRefusals) {
        if (groups.length > 1) out.push(h("h4", {}, `Version ${g.version} (${g === s.generation ? "served" : words(g.status)})`));
        out.push(
          table(
            ["Domain", "Source", "Detail", "Reason"],
            g.refused_domains.map((entry) => [
              h("code", {}, entry.domain),
              badge(entry.source, "plain"),
              entry.detail ? h("span", { class: "sv-wrap" }, entry.detail) : h("span", { class: "muted" }, "—"),
              h("span", { class: "sv-wrap" }, entry.reason),
            ]),
            `Refused candidates of version ${g.version}`,
          ),
        );
      }
    }
    return out;
  }

  // Documents.

  async documentsOf(server) {
    const served = server.generation || server.latest_generation;
    const wanted = this.documentsVersion;
    if (wanted === null || (served && served.version === wanted)) {
      return served ? { version: served.version, documents: served.documents } : { version: null, documents: [] };
    }
    try {
      const view = await api.get(api.path`/admin/servers/${this.id}/versions/${wanted}`, { signal: this.signal });
      return { version: view.version, documents: view.documents };
    } catch (error) {
      return { version: wanted, error };
    }
  }

  documentsTab() {
    const s = this.server;
    const docs = this.data.documents;
    const versions = this.data.versions && !this.data.versions.error ? this.data.versions.versions : [];
    const out = [];
    if (s.kind === "toolset") {
      return emptyState("No documents", "A toolset is registered as written; nothing is fetched for it.");
    }
    if (versions.length > 1) {
      const select = h(
        "select",
        { id: "sv-doc-version" },
        versions
          .slice()
          .reverse()
          .map((v) => h("option", { value: v.version, selected: v.version === docs.version }, `Version ${v.version} (${words(v.status)}${v.active ? ", active" : ""})`)),
      );
      select.addEventListener("change", async () => {
        this.documentsVersion = Number(select.value);
        await this.reload();
      });
      out.push(h("div", { class: "sv-inline-field" }, h("label", { for: "sv-doc-version" }, "Documents of"), select));
    }
    if (docs.error) {
      out.push(errorBox(docs.error));
      return out;
    }
    if (!docs.documents || !docs.documents.length) {
      out.push(
        emptyState(
          "No documents",
          docs.version
            ? `Version ${docs.version} fetched no documents${s.kind === "openapi" ? " (an inline API description is not fetched)" : ""}.`
            : "No version has been generated yet.",
        ),
      );
      return out;
    }
    out.push(h("p", { class: "muted" }, `${docs.documents.length} fetched for version ${docs.version}.`));
    out.push(h("ul", { class: "sv-doc-list" }, docs.documents.map((doc) => h("li", {}, documentCard(doc)))));
    return out;
  }

  // Versions.

  versionsTab() {
    const s = this.server;
    const list = this.data.versions;
    if (list && list.error) return errorBox(list.error);
    const versions = list.versions;
    const out = [];
    if (!versions.length) {
      out.push(emptyState("No versions", "This server has no generation yet."));
    } else {
      out.push(versionTable(this, versions));
    }
    out.push(h("div", { class: "sv-cards" }, versions.length > 1 ? diffPicker(this, versions) : null, regenerateCard(this), driftCard(this)));
    return out;
  }

  async decide(version, action, button) {
    const n = version.version;
    if (action === "approve") {
      const ok = await confirmDialog({
        title: `Approve version ${n}?`,
        text: "It becomes the active version and is served at once; calls in flight finish on the version they started on.",
        confirm: `Approve version ${n}`,
      });
      if (!ok) return;
      await this.change(() => api.post(api.path`/admin/servers/${this.id}/versions/${n}/approve`, {}, { signal: this.signal }));
      toast(`Version ${n} approved and served.`, "ok");
    } else if (action === "reject") {
      const reason = await reasonDialog({
        title: `Reject version ${n}?`,
        text: "It is kept with the reason and never served; the active version goes on serving.",
        label: "Reason (optional, kept with the version)",
        confirm: `Reject version ${n}`,
        danger: true,
      });
      if (reason === null) return;
      await this.change(() =>
        api.post(api.path`/admin/servers/${this.id}/versions/${n}/reject`, reason ? { reason } : {}, { signal: this.signal }),
      );
      toast(`Version ${n} rejected.`, "ok");
    } else if (action === "activate") {
      const active = this.data.versions.active_version;
      const ok = await confirmDialog({
        title: `Serve version ${n}?`,
        text: `${active ? `Version ${active} is served now. ` : ""}The server switches to version ${n} at once; calls in flight finish on the version they started on.`,
        confirm: `Activate version ${n}`,
      });
      if (!ok) return;
      await this.change(() => api.post(api.path`/admin/servers/${this.id}/activate`, { version: n }, { signal: this.signal }));
      toast(`Version ${n} is served.`, "ok");
    }
    await this.reload({ focusId: button.id });
  }

  // Settings.

  settingsTab() {
    return h(
      "div",
      { class: "sv-settings" },
      credentialsSection(this),
      connectionsSection(this),
      authSection(this),
      accessTokenSection(this),
      approvalSection(this),
      codeModeSection(this),
      exportSection(this),
      deleteSection(this),
    );
  }
}

// Helpers for the tabs.

const SOURCES = {
  operator: "listed in allow_domains",
  prompt: "a URL in the prompt",
  discovered: "found in a fetched document",
  openapi: "the API description's servers",
};

function kindText(kind) {
  return { toolset: "Toolset (registered as written)", prompt: "Prompt (generated)", openapi: "API description (derived)" }[kind] || kind;
}

/** Where a version came from, as the progress page says it. */
function sourceText(source) {
  return { llm: "Prompt (LLM)", openapi: "OpenAPI document", toolset: "Toolset" }[source] || source;
}

function driftBadge(drift) {
  const kind = { drifted: "drifted", failed: "failed", checking: "checking", unchanged: "plain" }[drift.status] || "plain";
  const element = badge(`drift: ${drift.status}`, kind);
  element.title = `Checked ${new Date(drift.checked_at).toLocaleString()}${drift.error ? `: ${drift.error}` : ""}`;
  return element;
}

/** A table with a caption for screen readers; `rows` are arrays of cells. */
function table(headers, rows, caption, { className = "" } = {}) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      { class: `sv-stack ${className}` },
      h("caption", { class: "visually-hidden" }, caption),
      h("thead", {}, h("tr", {}, headers.map((text) => h("th", { scope: "col" }, text)))),
      h(
        "tbody",
        {},
        rows.map((cells) => h("tr", {}, cells.map((cell, index) => h("td", { "data-label": headers[index] }, cell)))),
      ),
    ),
  );
}

function documentCard(doc) {
  const facts = [
    doc.final_url && doc.final_url !== doc.url ? ["Final URL", outboundLink(doc.final_url)] : null,
    doc.source_url && doc.source_url !== doc.url ? ["Found at", outboundLink(doc.source_url)] : null,
    ["Type", h("code", {}, doc.content_type || "—")],
    ["Size", `${bytes(doc.bytes)} · ${number.format(doc.chars)} characters`],
    ["Fetched", time(doc.fetched_at, { withAbsolute: true })],
    ["SHA-256", h("code", { class: "sv-hash", title: doc.sha256 }, doc.sha256 ? `${doc.sha256.slice(0, 16)}…` : "—")],
  ].filter(Boolean);
  const discovered = doc.discovered_urls || [];
  return h(
    "article",
    { class: "card sv-doc" },
    h("h3", { class: "sv-doc-url" }, outboundLink(doc.url)),
    h(
      "div",
      { class: "sv-badges" },
      doc.truncated ? badge("truncated", "warning") : null,
      doc.summarised ? badge("summarised", "info") : null,
    ),
    h("dl", { class: "facts" }, facts.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)])),
    discovered.length
      ? h(
          "details",
          { class: "sv-discovered" },
          h("summary", {}, `${discovered.length} discovered ${discovered.length === 1 ? "URL" : "URLs"}`),
          h("ul", {}, discovered.map((url) => h("li", {}, outboundLink(url)))),
        )
      : h("p", { class: "muted sv-small" }, "No URLs discovered in it."),
  );
}

function selfTestSummary(counts) {
  const entries = Object.entries(counts || {});
  if (!entries.length) return h("span", { class: "muted" }, "—");
  const kind = { passed: "ok", failed: "failed", skipped: "plain" };
  return h(
    "span",
    { class: "sv-badges" },
    entries.map(([status, count]) => badge(`${count} ${status}`, kind[status] || "info")),
  );
}

function versionTable(page, versions) {
  const id = page.id;
  const rows = versions
    .slice()
    .reverse()
    .map((v) => {
      const actions = [];
      if (v.status === "awaiting_approval") {
        actions.push(
          actionButton("Approve", (button) => page.decide(v, "approve", button), {
            class: "primary",
            id: `sv-approve-${v.version}`,
            "aria-label": `Approve version ${v.version}`,
          }),
          actionButton("Reject", (button) => page.decide(v, "reject", button), {
            id: `sv-reject-${v.version}`,
            "aria-label": `Reject version ${v.version}`,
          }),
        );
      } else if (v.status === "ready" && !v.active && !v.dry_run) {
        actions.push(
          actionButton("Activate", (button) => page.decide(v, "activate", button), {
            id: `sv-activate-${v.version}`,
            "aria-label": `Activate version ${v.version}`,
          }),
        );
      }
      if (v.version > 1) {
        actions.push(
          h(
            "a",
            { href: serverHref(id, "versions", v.version - 1, "diff", v.version), "aria-label": `Diff of version ${v.version} against version ${v.version - 1}` },
            `Diff ${v.version - 1}→${v.version}`,
          ),
        );
      }
      if (!isFinal(v.status)) {
        actions.push(h("a", { href: serverHref(id, "progress", v.generation_id), "aria-label": `Follow the generation of version ${v.version}` }, "Follow"));
      }
      const review = v.review && typeof v.review === "object" ? v.review : null;
      return [
        h("span", { class: "sv-version" }, h("strong", {}, `v${v.version}`), v.active ? [" ", badge("active")] : null),
        h(
          "div",
          { class: "sv-status-cell" },
          badge(v.status),
          v.dry_run ? [" ", badge("dry run", "plain")] : null,
          review
            ? h(
                "p",
                { class: "sv-small muted" },
                `${review.decision || "reviewed"}${review.at ? " " : ""}`,
                review.at ? time(review.at) : null,
                review.reason ? `: ${review.reason}` : "",
              )
            : null,
          v.error ? h("p", { class: "sv-small sv-error-text sv-clamp", title: v.error }, v.error) : null,
        ),
        h("span", {}, words(v.triggered_by), v.trigger_detail ? h("span", { class: "muted sv-small sv-block" }, v.trigger_detail) : null),
        h(
          "span",
          {},
          sourceText(v.source),
          v.model ? h("code", { class: "sv-small sv-block" }, v.model) : null,
          v.cache_hit ? h("span", { class: "muted sv-small sv-block" }, "from cache") : null,
        ),
        h("span", { class: "sv-num" }, String(v.tools.length)),
        selfTestSummary(v.self_test),
        h(
          "span",
          {},
          time(v.created_at),
          h("span", { class: "muted sv-small sv-block" }, v.finished_at ? ["finished ", time(v.finished_at)] : "not finished"),
        ),
        actions.length ? h("div", { class: "sv-row-actions" }, actions) : h("span", { class: "muted" }, "—"),
      ];
    });
  return table(
    ["Version", "Status", "Trigger", "Source and model", "Tools", "Self-test", "Created", "Actions"],
    rows,
    "Versions, newest first",
    { className: "sv-versions" },
  );
}

function diffPicker(page, versions) {
  const numbers = versions.map((v) => v.version);
  const newest = numbers[numbers.length - 1];
  const option = (n, selected) => h("option", { value: n, selected }, `Version ${n}`);
  const to = h("select", { id: "sv-diff-to" }, numbers.slice().reverse().map((n) => option(n, n === newest)));
  const from = h("select", { id: "sv-diff-from" }, numbers.slice().reverse().map((n) => option(n, n === newest - 1)));
  let fromTouched = false;
  const link = h("a", { class: "sv-button-link", id: "sv-diff-link" }, "Show diff");
  const update = () => {
    link.href = serverHref(page.id, "versions", from.value, "diff", to.value);
  };
  from.addEventListener("change", () => {
    fromTouched = true;
    update();
  });
  to.addEventListener("change", () => {
    if (!fromTouched) {
      const index = numbers.indexOf(Number(to.value));
      from.value = String(numbers[Math.max(0, index - 1)]);
    }
    update();
  });
  update();
  return h(
    "section",
    { class: "card sv-diff-picker", "aria-labelledby": "sv-diff-h" },
    h("h3", { id: "sv-diff-h" }, "Compare versions"),
    h(
      "div",
      { class: "sv-pair" },
      h("div", {}, h("label", { for: "sv-diff-from" }, "From"), from),
      h("div", {}, h("label", { for: "sv-diff-to" }, "To"), to),
      link,
    ),
  );
}

function regenerateCard(page) {
  const s = page.server;
  if (s.kind === "toolset") {
    return h(
      "section",
      { class: "card", "aria-labelledby": "sv-regen-h" },
      h("h3", { id: "sv-regen-h" }, "Regenerate"),
      h("p", { class: "muted" }, "A toolset is registered as written, so it has nothing to regenerate from. Export it, edit the tools, and register the result."),
    );
  }
  const dry = h("input", { type: "checkbox", id: "sv-regen-dry" });
  const force = h("input", { type: "checkbox", id: "sv-regen-force" });
  const status = h("div", { "aria-live": "polite" });
  const running = s.latest_generation && !isFinal(s.latest_generation.status);
  const button = actionButton(
    "Regenerate",
    async () => {
      replace(status);
      try {
        const started = await page.change(() =>
          api.post(api.path`/admin/servers/${page.id}/regenerate`, { dry_run: dry.checked, force: force.checked }, { signal: page.signal }),
        );
        toast(`Version being generated (generation ${started.generation_id}).`, "ok");
        go(`/servers/${encodeURIComponent(page.id)}/progress/${started.generation_id}`);
      } catch (error) {
        if (error.name !== "AbortError") replace(status, errorBox(error));
      }
    },
    { class: "primary", id: "sv-regenerate" },
  );
  return h(
    "section",
    { class: "card", "aria-labelledby": "sv-regen-h" },
    h("h3", { id: "sv-regen-h" }, "Regenerate"),
    h(
      "p",
      { class: "muted" },
      s.kind === "openapi"
        ? "Reads the API description again and derives a new version. The active version keeps serving meanwhile."
        : "Generates a new version from the prompt. The active version keeps serving meanwhile.",
    ),
    running ? h("p", { class: "notice" }, "A generation is running; a new one can start when it has finished.") : null,
    h("label", { class: "inline", for: "sv-regen-dry" }, dry, "Dry run (stop after planning; nothing is served)"),
    h("label", { class: "inline", for: "sv-regen-force" }, force, "Force (skip the generation cache)"),
    h("div", { class: "actions" }, button),
    status,
  );
}

function driftCard(page) {
  const s = page.server;
  if (s.kind !== "prompt") {
    if (s.kind === "openapi") {
      return h(
        "section",
        { class: "card", "aria-labelledby": "sv-drift-h" },
        h("h3", { id: "sv-drift-h" }, "Documentation drift"),
        h("p", { class: "muted" }, "Servers derived from an API description are not checked for drift; regenerate to read the description again."),
      );
    }
    return null;
  }
  const drift = s.drift;
  const result = h("div", { "aria-live": "polite" });
  const button = actionButton(
    "Check drift",
    async () => {
      replace(result);
      try {
        const report = await page.change(() => api.post(api.path`/admin/servers/${page.id}/check-drift`, {}, { signal: page.signal }));
        const changes = report.changes || [];
        replace(
          result,
          h(
            "div",
            { class: changes.length ? "notice" : "sv-ok-box" },
            h("p", {}, changes.length ? `${changes.length} ${changes.length === 1 ? "document" : "documents"} changed.` : "No document changed."),
            changes.length ? h("ul", {}, changes.map((c) => h("li", {}, outboundLink(c.url), ` (${bytes(c.before_bytes)} → ${bytes(c.after_bytes)})`))) : null,
            report.generation_id
              ? h("p", {}, "A candidate version started. ", h("a", { href: serverHref(page.id, "progress", report.generation_id) }, "Follow it"))
              : null,
          ),
        );
      } catch (error) {
        if (error.name !== "AbortError") replace(result, errorBox(error));
      }
    },
    { id: "sv-check-drift" },
  );
  return h(
    "section",
    { class: "card", "aria-labelledby": "sv-drift-h" },
    h("h3", { id: "sv-drift-h" }, "Documentation drift"),
    h("p", { class: "muted" }, "Fetches the newest version's documents again and compares them; a change starts a candidate version."),
    drift
      ? h(
          "dl",
          { class: "facts" },
          h("dt", {}, "Last check"),
          h("dd", {}, driftBadge(drift), " ", time(drift.checked_at)),
          drift.error ? [h("dt", {}, "Error"), h("dd", {}, drift.error)] : null,
          drift.awaiting_version ? [h("dt", {}, "Candidate"), h("dd", {}, `version ${drift.awaiting_version} awaits approval`)] : null,
        )
      : h("p", {}, "Not checked yet."),
    h("div", { class: "actions" }, button),
    result,
  );
}

// Settings sections.

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

/** The mode in force on the server's mount (`auth` in GET /admin/servers/{id}); a daemon from
 * before per-server auth only says whether an access token is set. */
function authOf(server) {
  if (server.auth && server.auth.mode) return { scopes: [], ...server.auth };
  return server.access_token_set ? { mode: "access_token", scopes: [], source: "server" } : { mode: "open", scopes: [], source: "default" };
}

function authBadge(auth) {
  const element =
    auth.mode === "access_token"
      ? badge("access token required", "info")
      : auth.mode === "oauth"
        ? badge("OAuth sign-in required", "info")
        : auth.mode === "open"
          ? badge("open to anyone", "plain")
          : badge(`auth: ${auth.mode}`, "plain");
  element.id = "sv-auth-badge";
  return element;
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
