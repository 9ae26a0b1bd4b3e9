// The server page's tools tab: each tool with its annotations and health, and repair.

import * as api from "../../api.js";
import { actionButton, badge, emptyState, h, toast } from "../../dom.js";
import { go } from "../../main.js";
import { annotationBadges, healthSummary, isFinal, selfTestBadge, serverHref } from "../../server-ui.js";

export function toolsTab(page) {
  const s = page.server;
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
                actionButton(`Repair ${tool.name}`, (button) => repair(page, tool.name, button), { id: `sv-repair-${tool.name}` }),
                h("span", { class: "muted" }, "Writes page tool's handler again from its recent failed calls; the result is a new version."),
              )
            : null,
        ),
      ),
    ),
  ];
}

export async function repair(page, tool) {
  const started = await page.change(() =>
    api.post(api.path`/admin/servers/${page.id}/regenerate`, { tools: [tool], with_failures: true }, { signal: page.signal }),
  );
  toast(`Repairing ${tool}: version being generated.`, "ok");
  go(`/servers/${encodeURIComponent(page.id)}/progress/${started.generation_id}`);
}
