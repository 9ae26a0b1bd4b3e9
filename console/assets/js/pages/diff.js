// What changes between two versions of a server (`#/servers/:id/versions/:from/diff/:to`):
// tools added, removed and renamed; per changed tool its title and description, schema and
// annotation changes and the handler's unified diff; whitelist and credentials.

import * as api from "../api.js";
import { badge, code, emptyState, errorBox, h, heading, replace } from "../dom.js";
import { go } from "../main.js";
import { breadcrumbs, compactJson, serverHref, words } from "../server-ui.js";

export async function render(main, params) {
  const { id, from, to } = params;
  const [server, versions, diff] = await Promise.allSettled([
    api.get(api.path`/admin/servers/${id}`),
    api.get(api.path`/admin/servers/${id}/versions`),
    api.get(api.path`/admin/servers/${id}/versions/${from}/diff/${to}`),
  ]);
  const name = server.status === "fulfilled" ? server.value.name : id;
  const title = `Version ${from} → ${to}`;
  main.append(
    breadcrumbs([
      ["Servers", "#/servers"],
      [name, serverHref(id)],
      ["Versions", serverHref(id, "versions")],
      [`Diff ${from}→${to}`],
    ]),
    heading(title, h("a", { class: "sv-button-link", href: serverHref(id, "versions") }, "Back to versions")),
  );
  document.title = `${name}: diff ${from}→${to} · mcpbootd console`;
  if (versions.status === "fulfilled" && versions.value.versions.length > 1) main.append(picker(id, versions.value, from, to));
  if (diff.status === "rejected") {
    const error = diff.reason;
    main.append(errorBox(error, error.status === 404 ? "Pick two versions the server has." : null));
    return;
  }
  main.append(...[renderDiff(id, diff.value, versions.status === "fulfilled" ? versions.value : null)].flat());
}

function picker(id, list, from, to) {
  const option = (v, selected) =>
    h("option", { value: v.version, selected }, `Version ${v.version} (${words(v.status)}${v.active ? ", active" : ""})`);
  const newestFirst = list.versions.slice().reverse();
  const fromSelect = h("select", { id: "diff-from" }, newestFirst.map((v) => option(v, String(v.version) === String(from))));
  const toSelect = h("select", { id: "diff-to" }, newestFirst.map((v) => option(v, String(v.version) === String(to))));
  const swap = h("button", { type: "button", class: "quiet", id: "diff-swap" }, "Swap");
  swap.addEventListener("click", () => {
    const a = fromSelect.value;
    fromSelect.value = toSelect.value;
    toSelect.value = a;
  });
  const form = h(
    "form",
    { class: "card sv-diff-picker", "aria-label": "Versions to compare" },
    h(
      "div",
      { class: "sv-pair" },
      h("div", {}, h("label", { for: "diff-from" }, "From"), fromSelect),
      h("div", {}, h("label", { for: "diff-to" }, "To"), toSelect),
      h("div", { class: "sv-picker-buttons" }, swap, h("button", { type: "submit", class: "primary" }, "Compare")),
    ),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    go(`/servers/${encodeURIComponent(id)}/versions/${fromSelect.value}/diff/${toSelect.value}`);
  });
  return form;
}

function isEmpty(diff) {
  return ["added", "removed", "renamed", "changed", "whitelist_added", "whitelist_removed", "credentials_added", "credentials_removed"].every(
    (key) => !diff[key] || diff[key].length === 0,
  );
}

function renderDiff(id, diff, list) {
  if (isEmpty(diff)) {
    return emptyState(
      "No differences",
      diff.from === diff.to
        ? "These are the same version; pick two different ones above."
        : `Versions ${diff.from} and ${diff.to} have the same tools, whitelist and credentials.`,
    );
  }
  const active = list ? list.active_version : null;
  const toolLink = (name, version) =>
    version === active ? h("a", { href: serverHref(id, "tools", name) }, h("code", {}, name)) : h("code", {}, name);
  const counts = [
    [diff.added.length, "added", "ok"],
    [diff.removed.length, "removed", "failed"],
    [diff.renamed.length, "renamed", "info"],
    [diff.changed.length, "changed", "warning"],
  ].filter(([n]) => n);
  const out = [
    h(
      "section",
      { class: "sv-section", "aria-labelledby": "diff-summary-h" },
      h("h2", { id: "diff-summary-h" }, "Summary"),
      h(
        "p",
        { class: "sv-badges" },
        counts.length ? counts.map(([n, what, kind]) => badge(`${n} ${n === 1 ? "tool" : "tools"} ${what}`, kind)) : h("span", { class: "muted" }, "The tools are the same."),
        diff.whitelist_added.length || diff.whitelist_removed.length ? badge("whitelist changed", "warning") : null,
        diff.credentials_added.length || diff.credentials_removed.length ? badge("credentials changed", "warning") : null,
      ),
    ),
  ];
  if (diff.added.length || diff.removed.length || diff.renamed.length) {
    out.push(
      h(
        "section",
        { class: "sv-section sv-diff-tools", "aria-labelledby": "diff-tools-h" },
        h("h2", { id: "diff-tools-h" }, "Tools"),
        h(
          "div",
          { class: "sv-cards" },
          diff.added.length ? listCard("Added", "diff-added-h", diff.added.map((name) => toolLink(name, diff.to)), "sv-plus") : null,
          diff.removed.length ? listCard("Removed", "diff-removed-h", diff.removed.map((name) => h("code", {}, name)), "sv-minus") : null,
          diff.renamed.length
            ? listCard(
                "Renamed",
                "diff-renamed-h",
                diff.renamed.map((r) => h("span", {}, h("code", {}, r.from), " → ", toolLink(r.to, diff.to))),
                "",
              )
            : null,
        ),
      ),
    );
  }
  if (diff.changed.length) {
    out.push(
      h(
        "section",
        { class: "sv-section", "aria-labelledby": "diff-changed-h" },
        h("h2", { id: "diff-changed-h" }, "Changed tools"),
        diff.changed.map((change, index) => changedTool(change, index, toolLink(change.name, diff.to))),
      ),
    );
  }
  if (diff.whitelist_added.length || diff.whitelist_removed.length || diff.credentials_added.length || diff.credentials_removed.length) {
    out.push(
      h(
        "section",
        { class: "sv-section", "aria-labelledby": "diff-access-h" },
        h("h2", { id: "diff-access-h" }, "Whitelist and credentials"),
        h(
          "div",
          { class: "sv-cards" },
          diff.whitelist_added.length ? listCard("Domains added", "diff-wl-added-h", diff.whitelist_added.map(codeText), "sv-plus") : null,
          diff.whitelist_removed.length ? listCard("Domains removed", "diff-wl-removed-h", diff.whitelist_removed.map(codeText), "sv-minus") : null,
          diff.credentials_added.length
            ? listCard("Credentials needed, added", "diff-cred-added-h", diff.credentials_added.map(codeText), "sv-plus")
            : null,
          diff.credentials_removed.length
            ? listCard("Credentials needed, removed", "diff-cred-removed-h", diff.credentials_removed.map(codeText), "sv-minus")
            : null,
        ),
      ),
    );
  }
  return out;
}

function codeText(text) {
  return h("code", {}, text);
}

function listCard(title, headingId, items, marker) {
  return h(
    "div",
    { class: `card sv-list-card ${marker}` },
    h("h3", { id: headingId }, title),
    h("ul", { "aria-labelledby": headingId }, items.map((item) => h("li", {}, item))),
  );
}

function changedTool(change, index, nameNode) {
  const id = `diff-tool-${index}`;
  const parts = [];
  if (change.title) parts.push(textChange("Title", change.title));
  if (change.description) parts.push(textChange("Description", change.description));
  if (change.input_schema && change.input_schema.length) parts.push(valueChanges("Input schema", change.input_schema));
  if (change.output_schema && change.output_schema.length) parts.push(valueChanges("Output schema", change.output_schema));
  if (change.annotations && change.annotations.length) parts.push(valueChanges("Annotations", change.annotations));
  if (change.handler) parts.push(h("div", { class: "sv-change" }, h("h4", {}, "Handler"), code(change.handler, "diff")));
  return h("article", { class: "card sv-changed-tool", "aria-labelledby": id }, h("h3", { id }, nameNode), parts);
}

/** A title or description before and after, with the changed words marked. */
function textChange(label, change) {
  const before = change.from ?? "";
  const after = change.to ?? "";
  const [beforeNodes, afterNodes] = wordDiff(before, after);
  return h(
    "div",
    { class: "sv-change" },
    h("h4", {}, label),
    h(
      "dl",
      { class: "sv-before-after" },
      h("dt", {}, "Before"),
      h("dd", { class: "sv-before" }, change.from === null || change.from === undefined ? h("span", { class: "muted" }, "(none)") : beforeNodes),
      h("dt", {}, "After"),
      h("dd", { class: "sv-after" }, change.to === null || change.to === undefined ? h("span", { class: "muted" }, "(none)") : afterNodes),
    ),
  );
}

/**
 * Words of `a` and `b` (whitespace kept), the words only in `a` as `<del>` and those only in `b`
 * as `<ins>`, by a longest common subsequence; long texts are shown whole instead.
 */
function wordDiff(a, b) {
  const left = a.split(/(\s+)/).filter((part) => part !== "");
  const right = b.split(/(\s+)/).filter((part) => part !== "");
  if (left.length * right.length > 250000) return [[a], [b]];
  const rows = left.length + 1;
  const cols = right.length + 1;
  const table = new Uint32Array(rows * cols);
  for (let i = left.length - 1; i >= 0; i--) {
    for (let j = right.length - 1; j >= 0; j--) {
      table[i * cols + j] = left[i] === right[j] ? table[(i + 1) * cols + j + 1] + 1 : Math.max(table[(i + 1) * cols + j], table[i * cols + j + 1]);
    }
  }
  const beforeOut = [];
  const afterOut = [];
  let i = 0;
  let j = 0;
  const push = (list, _tag, text) => list.push(text);
  // A run of changed words is one element; screen readers get its start and end as text.
  const appendTo = (list, tag, text) => {
    const last = list[list.length - 1];
    if (last && typeof last !== "string" && last.tagName === tag.toUpperCase()) {
      last.insertBefore(document.createTextNode(text), last.lastChild);
    } else {
      list.push(h(tag, {}, h("span", { class: "visually-hidden" }, tag === "del" ? "[removed: " : "[added: "), text, h("span", { class: "visually-hidden" }, "]")));
    }
  };
  while (i < left.length && j < right.length) {
    if (left[i] === right[j]) {
      push(beforeOut, null, left[i]);
      push(afterOut, null, right[j]);
      i++;
      j++;
    } else if (table[(i + 1) * cols + j] >= table[i * cols + j + 1]) {
      appendTo(beforeOut, "del", left[i++]);
    } else {
      appendTo(afterOut, "ins", right[j++]);
    }
  }
  while (i < left.length) appendTo(beforeOut, "del", left[i++]);
  while (j < right.length) appendTo(afterOut, "ins", right[j++]);
  return [beforeOut, afterOut];
}

/** Structural changes (`op`, `path`, `from`, `to`) as a table. */
function valueChanges(label, changes) {
  const opKind = { add: "ok", remove: "failed", replace: "warning" };
  return h(
    "div",
    { class: "sv-change" },
    h("h4", {}, label),
    h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        { class: "sv-stack sv-ops" },
        h("caption", { class: "visually-hidden" }, `${label} changes`),
        h("thead", {}, h("tr", {}, ["Change", "Path", "Before", "After"].map((text) => h("th", { scope: "col" }, text)))),
        h(
          "tbody",
          {},
          changes.map((change) =>
            h(
              "tr",
              {},
              h("td", { "data-label": "Change" }, badge(change.op, opKind[change.op] || "info")),
              h("td", { "data-label": "Path" }, h("code", {}, change.path || "/")),
              h("td", { "data-label": "Before" }, "from" in change ? h("code", { class: "sv-json-inline" }, compactJson(change.from, 400)) : h("span", { class: "muted" }, "—")),
              h("td", { "data-label": "After" }, "to" in change ? h("code", { class: "sv-json-inline" }, compactJson(change.to, 400)) : h("span", { class: "muted" }, "—")),
            ),
          ),
        ),
      ),
    ),
  );
}
