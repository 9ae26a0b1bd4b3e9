// One server (`#/servers/:id`, `#/servers/:id/:tab`): its header (status, MCP URL, flags) and
// the tabs tools, whitelist, documents, versions and settings. The page follows the daemon's
// event stream and redraws when this server changes (or offers to, while a form is in use).
// Each tab is a module of its own under `server/`, drawn from this page's state (`page`).

import * as api from "../api.js";
import { badge, errorBox, h, heading, replace, time } from "../dom.js";
import { breadcrumbs, copyButton, isFinal, outboundLink, serverHref, words } from "../server-ui.js";
import { authBadge, authOf, driftBadge } from "./server/common.js";
import { toolsTab } from "./server/tools.js";
import { whitelistTab } from "./server/whitelist.js";
import { documentsOf, documentsTab } from "./server/documents.js";
import { versionsTab } from "./server/versions.js";
import { settingsTab } from "./server/settings.js";

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
    if (this.tab === "documents") data.documents = await documentsOf(this, server);
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
      tools: () => toolsTab(this),
      whitelist: () => whitelistTab(this),
      documents: () => documentsTab(this),
      versions: () => versionsTab(this),
      settings: () => settingsTab(this),
    }[this.tab]();
    return h("section", { class: "sv-panel", "aria-labelledby": "sv-panel-h" }, h("h2", { id: "sv-panel-h", class: "sv-panel-h", tabindex: "-1" }, label), body);
  }
}

function kindText(kind) {
  return { toolset: "Toolset (registered as written)", prompt: "Prompt (generated)", openapi: "API description (derived)" }[kind] || kind;
}
