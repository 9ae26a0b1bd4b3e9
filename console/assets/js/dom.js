// Small DOM helpers shared by every page. Text from the daemon is always set as text (never as
// HTML), so a tool description or an error message cannot inject markup.

/**
 * `h("a", {href: "#/x", class: "y", onclick: fn}, "text", child)`: an element with attributes,
 * event handlers (`on…`), and children (strings become text nodes; null/false are skipped).
 * `dataset`-style keys (`data-x`) and `aria-…` keys are set as attributes.
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") element.addEventListener(key.slice(2), value);
    else if (key === "class") element.className = value;
    else if (key in element && !key.includes("-") && typeof value !== "string") element[key] = value;
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces `element`'s children. */
export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

// Times: the API speaks UTC (RFC 3339); the console shows the browser's zone, with a relative
// time next to it that stays current.

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const absolute = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "medium" });

export function relativeTime(date, now = Date.now()) {
  const seconds = Math.round((date.getTime() - now) / 1000);
  const steps = [
    [60, "second"],
    [60, "minute"],
    [24, "hour"],
    [30, "day"],
    [12, "month"],
    [Infinity, "year"],
  ];
  let value = seconds;
  for (const [size, unit] of steps) {
    if (Math.abs(value) < size) return relative.format(Math.trunc(value), unit);
    value /= size;
  }
  return "";
}

/** `<time>` showing "5 minutes ago", with the full local time as its title and text beside. */
export function time(iso, { withAbsolute = false } = {}) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return h("span", {}, iso);
  const element = h("time", { datetime: iso, title: absolute.format(date), "data-relative": "" }, relativeTime(date));
  return withAbsolute ? h("span", { class: "when" }, element, h("span", { class: "muted" }, ` (${absolute.format(date)})`)) : element;
}

export function localTime(iso) {
  return iso ? absolute.format(new Date(iso)) : "—";
}

// Relative times move on by themselves.
setInterval(() => {
  document.querySelectorAll("time[data-relative]").forEach((element) => {
    element.textContent = relativeTime(new Date(element.getAttribute("datetime")));
  });
}, 15000);

// Numbers.

export function durationUs(us) {
  if (us === null || us === undefined) return "—";
  if (us < 1000) return `${us} µs`;
  if (us < 1_000_000) return `${(us / 1000).toFixed(us < 10_000 ? 2 : 1)} ms`;
  return `${(us / 1_000_000).toFixed(2)} s`;
}

export function durationMs(ms) {
  return ms === null || ms === undefined ? "—" : durationUs(Math.round(ms * 1000));
}

export function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KB", "MB", "GB"];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

export const number = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

// Building blocks.

/** A status word as a coloured badge (ready, failed, generating, …). */
export function badge(text, kind = text) {
  return h("span", { class: `badge badge-${String(kind).replace(/[^a-z_]/g, "")}` }, String(text).replace(/_/g, " "));
}

/** An API error where the page would have been: the API's message, and what to do. */
export function errorBox(error, hint) {
  const message = error && error.message ? error.message : String(error);
  return h(
    "div",
    { class: "error-box", role: "alert" },
    h("strong", {}, error && error.status ? `Error ${error.status}` : "Error"),
    h("p", {}, message),
    hint ? h("p", { class: "muted" }, hint) : null,
  );
}

/** What an empty list means and what to do next. */
export function emptyState(title, text, action) {
  return h("div", { class: "empty-state" }, h("h3", {}, title), text ? h("p", {}, text) : null, action || null);
}

/** A short message in the corner, read out by screen readers. */
export function toast(message, kind = "info") {
  const element = h("div", { class: `toast toast-${kind}` }, message);
  document.getElementById("toasts").append(element);
  setTimeout(() => element.remove(), 5000);
}

/**
 * A modal dialog around `form`, with the buttons `cancel` and `ok` (its submit button) at the end;
 * `content` goes between the title and the buttons. Resolves to `answer()` when submitted, to
 * null when cancelled (or Escape). Focus starts on `focus` and goes back to where it was (the
 * button that opened the dialog) when it closes.
 */
export function modalDialog({ title, text, content = [], ok, answer, focus = ok }) {
  return new Promise((resolve) => {
    const cancel = h("button", { type: "button", class: "quiet" }, "Cancel");
    const form = h(
      "form",
      { method: "dialog" },
      h("h2", {}, title),
      text ? h("p", {}, text) : null,
      content,
      h("div", { class: "actions" }, cancel, ok),
    );
    const dialog = h("dialog", { class: "confirm" }, form);
    cancel.addEventListener("click", () => dialog.close("cancel"));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      dialog.close("ok");
    });
    const opener = document.activeElement;
    dialog.addEventListener("close", () => {
      dialog.remove();
      if (opener instanceof HTMLElement && opener.isConnected) opener.focus();
      resolve(dialog.returnValue === "ok" ? answer() : null);
    });
    document.body.append(dialog);
    dialog.showModal();
    focus.focus();
  });
}

/**
 * A modal question; resolves to true when confirmed. With `typed`, the user must type that text
 * (a server's id before deleting it) to enable the button.
 */
export async function confirmDialog({ title, text, confirm = "Confirm", danger = false, typed }) {
  const input = typed ? h("input", { type: "text", autocomplete: "off", spellcheck: "false", "aria-label": `Type ${typed} to confirm` }) : null;
  const ok = h("button", { type: "submit", class: danger ? "danger" : "primary", disabled: Boolean(typed) }, confirm);
  if (input) input.addEventListener("input", () => (ok.disabled = input.value !== typed));
  const content = typed ? h("label", {}, "Type ", h("code", {}, typed), " to confirm", input) : null;
  return (await modalDialog({ title, text, content, ok, answer: () => true, focus: input || ok })) === true;
}

/** A button that runs `action` once at a time, showing it is busy, and reports failures. */
export function actionButton(label, action, attributes = {}) {
  const button = h("button", { type: "button", ...attributes }, label);
  button.addEventListener("click", async () => {
    if (button.disabled) return;
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    try {
      await action(button);
    } catch (error) {
      if (error.name !== "AbortError") toast(error.message, "error");
    } finally {
      button.disabled = false;
      button.removeAttribute("aria-busy");
      // A disabled button cannot keep focus (a dialog it opened could not give it back).
      if (button.isConnected && document.activeElement === document.body) button.focus();
    }
  });
  return button;
}

/** Pretty-printed JSON in a `<pre>`, highlighted when the highlighter has loaded. */
export function jsonBlock(value) {
  return code(JSON.stringify(value, null, 2), "json");
}

/** Source code in a `<pre><code>`, highlighted by highlight.js (loaded on first use). */
export function code(text, language = "javascript") {
  const element = h("code", { class: `language-${language}` }, text);
  highlight(element, language);
  return h("pre", { class: "code" }, element);
}

let highlighter;
function highlight(element, language) {
  highlighter ||= import("./highlight.js");
  highlighter.then(({ highlightElement }) => highlightElement(element, language)).catch(() => {
    // Unhighlighted code is still readable.
  });
}

/** Sets the page title and the heading the main area starts with. */
export function heading(title, ...extra) {
  document.title = `${title} · mcpbootd console`;
  return h("div", { class: "page-heading" }, h("h1", {}, title), ...extra);
}
