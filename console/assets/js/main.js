// The console's entry point: the hash router (`#/servers/abc/tools`), the log-in gate and the
// navigation. Each page is a module under pages/ exporting `render(main, params, query)`, which
// fills `main` and may return a function that stops what it started (streams, timers) when the
// operator navigates away.

import * as api from "./api.js";
import { errorBox, h, replace } from "./dom.js";

/** `[pattern, section, page module]`; `:name` captures one path segment. First match wins. */
const ROUTES = [
  ["/login", null, () => import("./pages/login.js")],
  ["/servers", "servers", () => import("./pages/servers.js")],
  ["/register", "register", () => import("./pages/register.js")],
  ["/overview", "overview", () => import("./pages/overview.js")],
  ["/servers/:id/progress/:generation", "servers", () => import("./pages/progress.js")],
  ["/servers/:id/tools/:tool", "servers", () => import("./pages/tool.js")],
  ["/servers/:id/versions/:from/diff/:to", "servers", () => import("./pages/diff.js")],
  ["/servers/:id/calls", "servers", () => import("./pages/calls.js")],
  ["/servers/:id/:tab", "servers", () => import("./pages/server.js")],
  ["/servers/:id", "servers", () => import("./pages/server.js")],
];

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const logout = document.getElementById("logout");
let stopPage = null;
let rendering = 0;

function match(route) {
  const [pathPart, queryPart = ""] = route.split("?");
  const segments = pathPart.split("/").filter(Boolean).map(decodeURIComponent);
  for (const [pattern, section, load] of ROUTES) {
    const wanted = pattern.split("/").filter(Boolean);
    if (wanted.length !== segments.length) continue;
    const params = {};
    if (wanted.every((part, i) => (part.startsWith(":") ? ((params[part.slice(1)] = segments[i]), true) : part === segments[i]))) {
      return { section, load, params, query: new URLSearchParams(queryPart) };
    }
  }
  return null;
}

/**
 * Navigates to `route` (`/servers/abc`), replacing the history entry when `replaceEntry` is set.
 * With `from` (a page's element), only while that page is still shown: an answer that arrives
 * after the operator moved on does not pull them back.
 */
export function go(route, { replaceEntry = false, from = null } = {}) {
  if (from && !from.isConnected) return;
  const target = `#${route}`;
  if (location.hash === target) return render();
  if (replaceEntry) {
    history.replaceState(null, "", target);
    render();
  } else {
    location.hash = target;
  }
}

async function render() {
  const ticket = ++rendering;
  if (stopPage) {
    stopPage();
    stopPage = null;
  }
  const route = location.hash.replace(/^#/, "") || "/servers";
  const found = match(route);
  const loggedIn = await session();
  if (ticket !== rendering) return;
  // The log-in page itself may carry a query (`/login?next=…`): compare the path alone, or this
  // would redirect to it again and again without yielding.
  if (!loggedIn && route.split("?")[0] !== "/login") {
    const back = route.startsWith("/login") ? "/servers" : route;
    go(`/login?next=${encodeURIComponent(back)}`, { replaceEntry: true });
    return;
  }
  nav.hidden = !loggedIn;
  logout.hidden = !loggedIn || !api.token();
  for (const link of nav.querySelectorAll("a")) {
    if (found && link.dataset.section === found.section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!found) {
    replace(main, errorBox({ message: `There is no console page at ${route}.` }, "Use the links above."));
    return;
  }
  try {
    const page = await found.load();
    if (ticket !== rendering) return;
    // Each page draws into its own element: when the operator has moved on before a slow request
    // of the previous page answers, what it draws lands in a detached element, not over this page.
    const view = h("div", { class: "view" });
    main.replaceChildren(view);
    const stop = await page.render(view, found.params, found.query);
    if (ticket !== rendering) {
      if (typeof stop === "function") stop();
      return;
    }
    stopPage = typeof stop === "function" ? stop : null;
  } catch (error) {
    if (ticket === rendering && error.name !== "AbortError") replace(main, errorBox(error));
  }
  if (ticket === rendering && document.activeElement === document.body) main.focus({ preventScroll: true });
}

// Whether the console may load data: a token is stored, or the daemon has none (a loopback-only
// daemon without [admin] token). Asked once per page load.
let known = null;
async function session() {
  if (api.token()) return true;
  if (known === null) {
    try {
      await api.get("/admin/servers");
      known = true;
    } catch {
      known = false;
    }
  }
  return known;
}

/** Forget the session state after a log-in or log-out. */
export function sessionChanged() {
  known = null;
}

api.onUnauthorized(() => {
  // Without a stored token, the refusal is session()'s probe of a daemon that wants one: render()
  // sends the operator to log in, with nothing to say about an expired token.
  if (!api.token() || location.hash.startsWith("#/login")) return;
  api.setToken("");
  sessionChanged();
  const here = location.hash.replace(/^#/, "") || "/servers";
  go(`/login?next=${encodeURIComponent(here)}&expired=1`, { replaceEntry: true });
});

logout.addEventListener("click", () => {
  api.setToken("");
  sessionChanged();
  go("/login");
});

window.addEventListener("hashchange", render);
render();

export { h };
