// What several of a server page's tabs show: tables, badges for drift and auth.

import { badge, h } from "../../dom.js";

export function driftBadge(drift) {
  const kind = { drifted: "drifted", failed: "failed", checking: "checking", unchanged: "plain" }[drift.status] || "plain";
  const element = badge(`drift: ${drift.status}`, kind);
  element.title = `Checked ${new Date(drift.checked_at).toLocaleString()}${drift.error ? `: ${drift.error}` : ""}`;
  return element;
}

/** A table with a caption for screen readers; `rows` are arrays of cells. */
export function table(headers, rows, caption, { className = "" } = {}) {
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

/** The mode in force on the server's mount (`auth` in GET /admin/servers/{id}); a daemon from
 * before per-server auth only says whether an access token is set. */
export function authOf(server) {
  if (server.auth && server.auth.mode) return { scopes: [], ...server.auth };
  return server.access_token_set ? { mode: "access_token", scopes: [], source: "server" } : { mode: "open", scopes: [], source: "default" };
}

export function authBadge(auth) {
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
