// The server page's documents tab: the documents its generation read.

import * as api from "../../api.js";
import { badge, bytes, emptyState, errorBox, h, number, time } from "../../dom.js";
import { outboundLink, words } from "../../server-ui.js";

export async function documentsOf(page, server) {
  const served = server.generation || server.latest_generation;
  const wanted = page.documentsVersion;
  if (wanted === null || (served && served.version === wanted)) {
    return served ? { version: served.version, documents: served.documents } : { version: null, documents: [] };
  }
  try {
    const view = await api.get(api.path`/admin/servers/${page.id}/versions/${wanted}`, { signal: page.signal });
    return { version: view.version, documents: view.documents };
  } catch (error) {
    return { version: wanted, error };
  }
}

export function documentsTab(page) {
  const s = page.server;
  const docs = page.data.documents;
  const versions = page.data.versions && !page.data.versions.error ? page.data.versions.versions : [];
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
      page.documentsVersion = Number(select.value);
      await page.reload();
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
