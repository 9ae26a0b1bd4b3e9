// Asks for the admin token once per tab. The token is checked against the API before it is
// kept, and a wrong one is reported with the API's message.

import * as api from "../api.js";
import { errorBox, h, heading, replace } from "../dom.js";
import { go, sessionChanged } from "../main.js";

export function render(main, _params, query) {
  const next = query.get("next") || "/servers";
  const input = h("input", {
    id: "token",
    type: "password",
    name: "token",
    autocomplete: "off",
    required: true,
    spellcheck: "false",
    "aria-describedby": "token-help",
  });
  const status = h("div", { "aria-live": "polite" });
  const submit = h("button", { type: "submit", class: "primary" }, "Log in");
  const form = h(
    "form",
    { class: "card login" },
    h("label", { for: "token" }, "Admin token"),
    input,
    h(
      "p",
      { id: "token-help", class: "muted" },
      "The daemon's [admin] token (MCPBOOTD_ADMIN_TOKEN). It is kept in this tab only and sent as a header, never in a URL.",
    ),
    submit,
    status,
  );
  if (query.get("expired")) replace(status, errorBox({ message: "The daemon refused the stored token; enter it again." }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    replace(status, h("p", { class: "muted" }, "Checking…"));
    api.setToken(input.value.trim());
    try {
      await api.get("/admin/servers");
      sessionChanged();
      go(next.startsWith("/login") ? "/servers" : next, { replaceEntry: true });
    } catch (error) {
      api.setToken("");
      const hint = error.unauthorized ? "Check the token in the daemon's configuration and try again." : null;
      replace(status, errorBox(error, hint));
      input.select();
    } finally {
      submit.disabled = false;
    }
  });
  main.append(heading("Log in"), form);
  input.focus();
}
