// The servers list: every registered server with its status, tools, last hour's calls and what
// needs attention (degraded tools, documentation drift, a version awaiting approval). A filter
// box narrows it as you type (`/` focuses it); the list refreshes itself while it is shown.

import * as api from "../api.js";
import { badge, emptyState, errorBox, h, heading, number, replace, time } from "../dom.js";

const REFRESH_MS = 10_000;

export function render(main, _params, query) {
  const controller = new AbortController();
  let servers = null;
  let timer = null;
  let shownError = "";

  const search = h("input", {
    id: "server-filter",
    type: "search",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "Name, id, kind or status",
    "aria-describedby": "server-filter-hint",
    "aria-controls": "server-list",
    "aria-keyshortcuts": "/",
  });
  search.value = query.get("q") || "";
  const count = h("p", { id: "server-count", class: "muted servers-count", "aria-live": "polite" });
  const status = h("div", { class: "servers-status" });
  const list = h("div", { id: "server-list" });

  const toolbar = h(
    "div",
    { class: "servers-toolbar", role: "search" },
    h(
      "div",
      { class: "servers-filter" },
      h("label", { for: "server-filter" }, "Filter servers"),
      search,
      h("p", { id: "server-filter-hint", class: "muted hint" }, "Press ", h("kbd", {}, "/"), " to jump here, ", h("kbd", {}, "Esc"), " to clear."),
    ),
    count,
  );

  main.append(
    heading("Servers", h("a", { class: "button primary", href: "#/register" }, "Register a server")),
    toolbar,
    status,
    list,
  );

  function matches(server, words) {
    const haystack = [server.name, server.id, server.kind, server.status, String(server.status).replace(/_/g, " ")]
      .join(" ")
      .toLowerCase();
    return words.every((word) => haystack.includes(word));
  }

  function draw() {
    if (servers === null) return;
    if (servers.length === 0) {
      count.textContent = "";
      replace(
        list,
        emptyState(
          "No servers yet",
          ["Register one from a prompt, an OpenAPI document or a hand-written toolset. From a shell, ", h("code", {}, "mcpbootd register"), " does the same."],
          h("p", {}, h("a", { class: "button primary", href: "#/register" }, "Register a server")),
        ),
      );
      return;
    }
    const text = search.value.trim().toLowerCase();
    const words = text.split(/\s+/).filter(Boolean);
    const shown = servers.filter((server) => matches(server, words));
    const counted = words.length
      ? `${shown.length} of ${servers.length} ${servers.length === 1 ? "server" : "servers"} match`
      : `${servers.length} ${servers.length === 1 ? "server" : "servers"}`;
    // Unchanged text is left alone, so a refresh is not read out again.
    if (count.textContent !== counted) count.textContent = counted;
    if (shown.length === 0) {
      replace(
        list,
        emptyState(
          "No server matches",
          `Nothing has “${search.value.trim()}” in its name, id, kind or status.`,
          h("button", { type: "button", onclick: () => setFilter("") }, "Clear the filter"),
        ),
      );
      return;
    }
    keepFocus(list, () => replace(list, table(shown)));
  }

  function setFilter(value) {
    search.value = value;
    remember();
    draw();
    search.focus();
  }

  // The filter is kept in the address (without re-rendering), so reload and back keep it.
  function remember() {
    const value = search.value.trim();
    history.replaceState(null, "", value ? `#/servers?q=${encodeURIComponent(value)}` : "#/servers");
  }

  search.addEventListener("input", () => {
    remember();
    draw();
  });
  search.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && search.value) {
      event.preventDefault();
      setFilter("");
    }
  });

  function onKey(event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof HTMLElement && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    if (document.querySelector("dialog[open]")) return;
    event.preventDefault();
    search.focus();
    search.select();
  }
  document.addEventListener("keydown", onKey);

  async function load() {
    try {
      const answer = await api.get("/admin/servers", { signal: controller.signal });
      servers = answer.servers || [];
      status.replaceChildren();
      shownError = "";
      draw();
    } catch (error) {
      if (error.name === "AbortError") return;
      // Keep the last list on screen; say the refresh failed.
      // The same failure again is not announced again.
      if (error.message !== shownError) replace(status, errorBox(error, servers ? "The list below is from the last successful refresh." : null));
      shownError = error.message;
    }
    if (!controller.signal.aborted) timer = setTimeout(load, REFRESH_MS);
  }

  // Fill the page before the router moves focus, so `/`-less keyboard users land on content.
  const first = load();
  return first.then(() => () => {
    controller.abort();
    clearTimeout(timer);
    document.removeEventListener("keydown", onKey);
  });
}

/** Runs `update` (which rebuilds `container`) and puts the focus back on the same link. */
function keepFocus(container, update) {
  const active = document.activeElement;
  const href = active && container.contains(active) ? active.getAttribute("href") : null;
  update();
  if (href) {
    const again = [...container.querySelectorAll("a[href]")].find((link) => link.getAttribute("href") === href);
    if (again) again.focus({ preventScroll: true });
  }
}

function table(servers) {
  return h(
    "div",
    { class: "table-wrap stack servers-table-wrap" },
    h(
      "table",
      { class: "servers-table" },
      h("caption", { class: "visually-hidden" }, "Registered servers"),
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", { scope: "col" }, "Name"),
          h("th", { scope: "col", class: "col-id" }, "Id"),
          h("th", { scope: "col", class: "col-kind" }, "Kind"),
          h("th", { scope: "col" }, "Status"),
          h("th", { scope: "col", class: "number" }, "Tools"),
          h("th", { scope: "col", class: "number", title: "Calls in the last hour" }, "Calls (1 h)"),
          h("th", { scope: "col", class: "number", title: "Calls in the last hour whose outcome was not ok" }, "Errors (1 h)"),
          h("th", { scope: "col" }, "Flags"),
          h("th", { scope: "col", class: "col-updated" }, "Updated"),
        ),
      ),
      h("tbody", {}, servers.map(row)),
    ),
  );
}

function row(server) {
  const errors = server.errors_last_hour;
  return h(
    "tr",
    { "data-server-id": server.id },
    h(
      "td",
      { class: "col-name card-title", "data-label": "Name" },
      h("a", { href: `#/servers/${encodeURIComponent(server.id)}`, class: "server-name" }, server.name || server.id),
      server.name && server.name !== server.id ? h("span", { class: "muted mobile-only" }, " · ", h("code", {}, server.id)) : null,
    ),
    h("td", { class: "col-id hide-narrow", "data-label": "Id" }, h("code", {}, server.id)),
    h("td", { class: "col-kind", "data-label": "Kind" }, kindLabel(server.kind)),
    h("td", { "data-label": "Status" }, badge(server.status)),
    h("td", { class: "number", "data-label": "Tools" }, count(server.tool_count)),
    h("td", { class: "number", "data-label": "Calls (1 h)" }, count(server.calls_last_hour)),
    h(
      "td",
      { class: `number${errors > 0 ? " has-errors" : ""}`, "data-label": "Errors (1 h)" },
      count(errors),
    ),
    h("td", { class: `col-flags card-wide${hasFlags(server) ? "" : " hide-narrow"}`, "data-label": "Flags" }, flags(server)),
    h("td", { class: "col-updated", "data-label": "Updated" }, time(server.updated_at)),
  );
}

function count(value) {
  return typeof value === "number" ? number.format(value) : h("span", { class: "muted", title: "Not reported by this daemon" }, "—");
}

function kindLabel(kind) {
  return { prompt: "Prompt", openapi: "OpenAPI", toolset: "Toolset" }[kind] || kind;
}

function hasFlags(server) {
  return (server.degraded_tools || []).length > 0 || server.drift === "drifted" || server.drift === "failed" || server.status === "awaiting_approval";
}

function flags(server) {
  const out = [];
  const degraded = server.degraded_tools || [];
  if (degraded.length) {
    out.push(
      h(
        "span",
        { class: "badge badge-degraded", title: `Tools whose recent calls mostly failed: ${degraded.join(", ")}` },
        degraded.length === 1 ? `degraded: ${degraded[0]}` : `${degraded.length} tools degraded`,
      ),
    );
  }
  if (server.drift === "drifted") out.push(h("span", { class: "badge badge-drifted", title: "The documentation changed since this version was made" }, "drifted"));
  if (server.drift === "failed") out.push(h("span", { class: "badge badge-warning", title: "The last documentation check could not run" }, "drift check failed"));
  if (server.status === "awaiting_approval") {
    out.push(
      h(
        "a",
        { class: "badge badge-awaiting_approval flag-link", href: `#/servers/${encodeURIComponent(server.id)}/versions`, title: "A new version waits for an operator's approval" },
        "review the new version",
      ),
    );
  }
  return out.length ? h("span", { class: "flags" }, out) : h("span", { class: "muted" }, "—");
}
