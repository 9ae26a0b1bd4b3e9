// The server page's whitelist tab: the domains a server's handlers may reach and why.

import { badge, emptyState, h } from "../../dom.js";
import { words } from "../../server-ui.js";
import { table } from "./common.js";

export function whitelistTab(page) {
  const s = page.server;
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

const SOURCES = {
  operator: "listed in allow_domains",
  prompt: "a URL in the prompt",
  discovered: "found in a fetched document",
  openapi: "the API description's servers",
};
