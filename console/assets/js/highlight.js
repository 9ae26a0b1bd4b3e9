// Syntax highlighting with highlight.js (console/assets/vendor/highlight, copied from the npm package
// pinned in console/package-lock.json), limited to the languages the console shows.
import hljs from "../vendor/highlight/core.min.js";
import javascript from "../vendor/highlight/languages/javascript.min.js";
import json from "../vendor/highlight/languages/json.min.js";
import diff from "../vendor/highlight/languages/diff.min.js";

hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("json", json);
hljs.registerLanguage("diff", diff);
hljs.configure({ ignoreUnescapedHTML: true });

/** Highlights `element` (a `<code>` holding text) as `language`. */
export function highlightElement(element, language) {
  const { value } = hljs.highlight(element.textContent, { language, ignoreIllegals: true });
  // highlight.js escapes the text it wraps in spans, so this holds no markup from the input.
  element.innerHTML = value;
  element.classList.add("hljs");
}
