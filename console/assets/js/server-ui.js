// Pieces the server pages share (the server page, a tool's page, a version diff): breadcrumbs,
// copy buttons, annotation and health badges, safe outbound links, small dialogs.

import { badge, h, modalDialog, number, toast } from "./dom.js";

/** Statuses of a finished generation (the daemon's `Status::is_final`). */
const FINAL = new Set(["ready", "planned", "failed", "awaiting_approval", "rejected"]);

/** Whether a generation in `status` has finished; unknown statuses (a newer daemon's stages)
 * are taken as running, as the daemon does. */
export function isFinal(status) {
  return FINAL.has(status);
}

/** `#/servers/<id>/…` with each segment encoded. */
export function serverHref(id, ...segments) {
  return "#/servers/" + [id, ...segments].map((part) => encodeURIComponent(String(part))).join("/");
}

/** `<nav aria-label="Breadcrumb">`: `[[label, href], …, [label]]`, the last one the current page. */
export function breadcrumbs(items) {
  return h(
    "nav",
    { class: "sv-crumbs", "aria-label": "Breadcrumb" },
    h(
      "ol",
      {},
      items.map(([label, href], index) =>
        h("li", {}, href && index < items.length - 1 ? h("a", { href }, label) : h("span", { "aria-current": "page" }, label)),
      ),
    ),
  );
}

/** Writes `text` to the clipboard; falls back to a selected text area where the API is missing
 * (a page not served over HTTPS or loopback). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = h("textarea", { class: "sv-offscreen", readonly: true, "aria-hidden": "true", tabindex: "-1" }, text);
  document.body.append(area);
  area.select();
  const ok = document.execCommand("copy");
  area.remove();
  if (!ok) throw new Error("the browser did not allow copying; select the text and copy it by hand");
}

/** A button that copies `text()` (or `text`) and says so. `label` names what is copied. */
export function copyButton(text, label) {
  const button = h("button", { type: "button", class: "quiet sv-copy", "aria-label": `Copy ${label}` }, "Copy");
  button.addEventListener("click", async () => {
    try {
      await copyText(typeof text === "function" ? text() : text);
      button.textContent = "Copied";
      toast(`Copied the ${label}.`, "ok");
      setTimeout(() => (button.textContent = "Copy"), 2000);
    } catch (error) {
      toast(error.message, "error");
    }
  });
  return button;
}

/** A link to an http(s) URL from the daemon's data; anything else is shown as text. */
export function outboundLink(url, text = url) {
  let parsed = null;
  try {
    parsed = new URL(url);
  } catch {
    // Not a URL: shown as text.
  }
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) return h("span", { class: "sv-url" }, text);
  return h("a", { class: "sv-url", href: parsed.href, rel: "noopener noreferrer", target: "_blank" }, text);
}

const HINTS = [
  ["readOnlyHint", "read-only", "ok", "writes", "warning"],
  ["destructiveHint", "destructive", "failed", null, null],
  ["idempotentHint", "idempotent", "info", null, null],
  ["openWorldHint", "open world", "info", "closed world", null],
];

/** MCP tool annotations as badges: read-only, destructive, idempotent, open world. */
export function annotationBadges(annotations) {
  if (!annotations) return [];
  const out = [];
  for (const [key, yes, yesKind, no, noKind] of HINTS) {
    if (annotations[key] === true) out.push(hinted(badge(yes, yesKind), key, true));
    else if (annotations[key] === false && no) out.push(hinted(badge(no, noKind || "plain"), key, false));
  }
  return out;
}

function hinted(element, key, value) {
  element.title = `${key}: ${value}`;
  return element;
}

/** A self-test result (`{status, attempts, error|reason}`) as a badge. */
export function selfTestBadge(selfTest) {
  if (!selfTest || !selfTest.status) return null;
  const kind = { passed: "ok", failed: "failed", skipped: "plain" }[selfTest.status] || "info";
  return badge(`self-test ${selfTest.status}`, kind);
}

/** A tool's recent calls (`ToolHealthView`) as a badge and a short text. */
export function healthSummary(health) {
  if (!health) return null;
  if (health.calls === 0) return h("span", { class: "muted" }, "not called yet");
  const rate = `${number.format(Math.round(health.error_rate * 1000) / 10)}%`;
  return h(
    "span",
    { class: "sv-health" },
    health.degraded ? [badge("degraded"), " "] : health.failures === 0 ? [badge("healthy", "ok"), " "] : null,
    `${health.failures} of the last ${health.calls} ${health.calls === 1 ? "call" : "calls"} failed (${rate})`,
  );
}

/** Milliseconds since the epoch (credentials' times) as RFC 3339, for `time()`. */
export function isoFromMillis(ms) {
  return typeof ms === "number" ? new Date(ms).toISOString() : null;
}

/** A JSON value on one line, shortened. */
export function compactJson(value, max = 240) {
  if (value === undefined) return "—";
  const text = JSON.stringify(value);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/**
 * A modal with a text area; resolves to its text (maybe empty), or null when cancelled.
 * Styled like `confirmDialog`.
 */
export function reasonDialog({ title, text, label, confirm, danger = false, maxLength = 2000 }) {
  const area = h("textarea", { id: "sv-reason", maxlength: maxLength, rows: 4 });
  const ok = h("button", { type: "submit", class: danger ? "danger" : "primary" }, confirm);
  const content = [h("label", { for: "sv-reason" }, label), area];
  return modalDialog({ title, text, content, ok, answer: () => area.value.trim(), focus: area });
}

/** Text for people: a status word without underscores. */
export function words(text) {
  return String(text ?? "").replace(/_/g, " ");
}
