// The server page's versions tab: versions, review, rollback, regeneration and drift.

import * as api from "../../api.js";
import { actionButton, badge, bytes, confirmDialog, emptyState, errorBox, h, replace, time, toast } from "../../dom.js";
import { go } from "../../main.js";
import { isFinal, outboundLink, reasonDialog, serverHref, words } from "../../server-ui.js";
import { driftBadge, table } from "./common.js";

export function versionsTab(page) {
  const s = page.server;
  const list = page.data.versions;
  if (list && list.error) return errorBox(list.error);
  const versions = list.versions;
  const out = [];
  if (!versions.length) {
    out.push(emptyState("No versions", "This server has no generation yet."));
  } else {
    out.push(versionTable(page, versions));
  }
  out.push(h("div", { class: "sv-cards" }, versions.length > 1 ? diffPicker(page, versions) : null, regenerateCard(page), driftCard(page)));
  return out;
}

export async function decide(page, version, action, button) {
  const n = version.version;
  if (action === "approve") {
    const ok = await confirmDialog({
      title: `Approve version ${n}?`,
      text: "It becomes the active version and is served at once; calls in flight finish on the version they started on.",
      confirm: `Approve version ${n}`,
    });
    if (!ok) return;
    await page.change(() => api.post(api.path`/admin/servers/${page.id}/versions/${n}/approve`, {}, { signal: page.signal }));
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
    await page.change(() =>
      api.post(api.path`/admin/servers/${page.id}/versions/${n}/reject`, reason ? { reason } : {}, { signal: page.signal }),
    );
    toast(`Version ${n} rejected.`, "ok");
  } else if (action === "activate") {
    const active = page.data.versions.active_version;
    const ok = await confirmDialog({
      title: `Serve version ${n}?`,
      text: `${active ? `Version ${active} is served now. ` : ""}The server switches to version ${n} at once; calls in flight finish on the version they started on.`,
      confirm: `Activate version ${n}`,
    });
    if (!ok) return;
    await page.change(() => api.post(api.path`/admin/servers/${page.id}/activate`, { version: n }, { signal: page.signal }));
    toast(`Version ${n} is served.`, "ok");
  }
  await page.reload({ focusId: button.id });
}

/** Where a version came from, as the progress page says it. */
function sourceText(source) {
  return { llm: "Prompt (LLM)", openapi: "OpenAPI document", toolset: "Toolset" }[source] || source;
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
          actionButton("Approve", (button) => decide(page, v, "approve", button), {
            class: "primary",
            id: `sv-approve-${v.version}`,
            "aria-label": `Approve version ${v.version}`,
          }),
          actionButton("Reject", (button) => decide(page, v, "reject", button), {
            id: `sv-reject-${v.version}`,
            "aria-label": `Reject version ${v.version}`,
          }),
        );
      } else if (v.status === "ready" && !v.active && !v.dry_run) {
        actions.push(
          actionButton("Activate", (button) => decide(page, v, "activate", button), {
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
