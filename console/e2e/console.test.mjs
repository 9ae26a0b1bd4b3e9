// End-to-end test of the web console: Chromium (Debian's, driven by playwright-core) against a
// running daemon. tests/it/console.rs starts the daemon and runs this script; see console/README.md.
//
// Environment:
//   CONSOLE_E2E_URL          the daemon, http://127.0.0.1:PORT (required)
//   CONSOLE_E2E_TOKEN        its [admin] token (required)
//   CONSOLE_E2E_SCREENSHOTS  directory for the screenshots, <flow>-<page>-<variant>.png (required)
//   CONSOLE_E2E_PROMPT       a prompt the daemon's scripted LLM turns into a server (for the flows that register one)
//   CONSOLE_E2E_SERVER       the id of a toolset server registered before the run
//   CONSOLE_E2E_CHROMIUM     the browser to drive (default /usr/bin/chromium)
//   CONSOLE_E2E_FLOWS        comma-separated flow names to run (default: all)
//
// Each flow is an async function run in a fresh browser context (its own sessionStorage), one
// after the other. In every flow, whatever page it visits:
//   * no console error (a CSP violation is one) and no uncaught exception,
//   * no request leaves the daemon's origin, and no requested URL contains the admin token,
//   * every console file is served with the Content-Security-Policy.
// A flow that fails is reported by name with its errors and a screenshot (<flow>-failure.png);
// the others still run. The last line says how many passed and failed; the exit status is 1 when
// any failed.

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const URL_ = required("CONSOLE_E2E_URL").replace(/\/$/, "");
const TOKEN = required("CONSOLE_E2E_TOKEN");
const SCREENSHOTS = required("CONSOLE_E2E_SCREENSHOTS");
const CHROMIUM = process.env.CONSOLE_E2E_CHROMIUM || "/usr/bin/chromium";
const SERVER = process.env.CONSOLE_E2E_SERVER || "";
// For the flows that register a server from a prompt through the Register page.
const PROMPT = process.env.CONSOLE_E2E_PROMPT || "";
const ONLY = (process.env.CONSOLE_E2E_FLOWS || "").split(",").filter(Boolean);
const ORIGIN = new URL(URL_).origin;

/** Longest a flow may take; the daemon is local, so anything slower is a hang. */
const FLOW_TIMEOUT_MS = 45_000;
/** Longest one wait for an element or a navigation. */
const STEP_TIMEOUT_MS = 10_000;

/** The screenshots taken of each page: `[variant, viewport, color scheme]`. */
const VARIANTS = [
  ["light", { width: 1280, height: 800 }, "light"],
  ["dark", { width: 1280, height: 800 }, "dark"],
  ["mobile", { width: 390, height: 844 }, "light"],
];

/** What every console response carries (src/api/console.rs). */
const CSP_DIRECTIVES = ["default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"];

/** The id the register-prompt flow gives the server it generates; the flows after it use it. */
const GENERATED = "e2e-items";
/** The stages of a generation between queued and finished (progress.js). */
const RUNNING_STAGES = ["fetching", "planning", "compiling", "testing"];
/** Longest a generation may take from submitting to ready. */
const GENERATION_TIMEOUT_MS = 25_000;
/** Longest the overview may take to show calls: the daemon samples every 5 s, the page polls every 5 s. */
const OVERVIEW_TIMEOUT_MS = 20_000;

// ---------------------------------------------------------------------------------------------
// Flows

/** (a) Log-in: the form, a wrong token, the right one, a reload, log-out. */
async function login(t) {
  const { page } = t;
  await t.open("/console");
  await page.waitForURL((url) => url.hash.startsWith("#/login"), { timeout: STEP_TIMEOUT_MS });
  const field = page.getByLabel("Admin token");
  const submit = page.getByRole("button", { name: "Log in" });
  await field.waitFor();
  await submit.waitFor();
  t.check(await page.locator("#nav").isHidden(), "the navigation is hidden before logging in");
  t.check((await page.locator("#main .error-box").count()) === 0, "a first visit shows no error");
  await t.shoot("login");

  // A wrong token: the API's message, still on the log-in page, and no data shown.
  const answered = t.apiResponses.length;
  await field.fill("not-the-token");
  await submit.click();
  await page.getByText("the admin token is not valid").waitFor();
  t.check(new URL(page.url()).hash.startsWith("#/login"), `a wrong token stays on the log-in page (at ${page.url()})`);
  t.check(await page.locator("#nav").isHidden(), "the navigation stays hidden after a wrong token");
  const leaked = t.apiResponses.slice(answered).filter((r) => r.status < 400);
  t.check(leaked.length === 0, `a wrong token got data: ${leaked.map((r) => `${r.status} ${r.url}`).join(", ")}`);
  t.check((await t.storedToken()) === null, "a wrong token is not kept");
  await t.shoot("login-refused");

  // The right token: the Servers page.
  await field.fill(TOKEN);
  await submit.click();
  await page.waitForURL((url) => !url.hash.startsWith("#/login"), { timeout: STEP_TIMEOUT_MS });
  await t.loggedIn("servers");
  if (SERVER) await page.locator(`tr[data-server-id="${SERVER}"]`).waitFor();
  t.check((await t.storedToken()) === TOKEN, "the token is kept in the tab's sessionStorage");
  const elsewhere = await page.evaluate(
    (token) => JSON.stringify(localStorage).includes(token) || document.cookie.includes(token),
    TOKEN,
  );
  t.check(!elsewhere, "the token is in neither localStorage nor a cookie");
  await t.shoot("servers");

  // A reload keeps the session (sessionStorage lives as long as the tab).
  await page.reload();
  await t.loggedIn("servers");
  t.check(!new URL(page.url()).hash.startsWith("#/login"), `a reload keeps the session (at ${page.url()})`);

  // Log out: back to the form, the token gone.
  await page.getByRole("button", { name: "Log out" }).click();
  await page.waitForURL((url) => url.hash.startsWith("#/login"), { timeout: STEP_TIMEOUT_MS });
  await field.waitFor();
  t.check((await t.storedToken()) === null, "logging out forgets the token");

  // A stored token the daemon no longer takes (it was changed): asked for again, with a reason,
  // when the page asks the API for its data.
  await page.evaluate(() => sessionStorage.setItem("mcpbootd.adminToken", "a-token-from-before"));
  await t.open("/console#/overview");
  // The refusal first (so the reload cannot race the console's own move to the log-in page).
  await page.waitForURL((url) => url.hash.includes("expired=1"), { timeout: STEP_TIMEOUT_MS });
  await page.reload();
  await page.getByText("The daemon refused the stored token; enter it again.").waitFor();
  const back = new URL(page.url()).hash;
  t.check(back.startsWith("#/login?next=%2Foverview"), `a refused token returns to the log-in page, then to the page (${back})`);
  t.check((await t.storedToken()) === null, "a refused token is forgotten");
  await t.shoot("login-expired", { variants: ["light"] });
}

/** (b) Each section in the navigation, and a route that does not exist; a console error or an
 * uncaught exception on any of them fails the flow (as in every flow). */
async function navigation(t) {
  const { page } = t;
  await t.logIn();
  for (const [section, title] of [["register", "Register"], ["overview", "Overview"], ["servers", "Servers"]]) {
    await page.locator("#nav").getByRole("link", { name: title }).click();
    await page.waitForURL((url) => url.hash === `#/${section}`, { timeout: STEP_TIMEOUT_MS });
    await t.loggedIn(section);
    const current = await page.locator("#nav a[aria-current=page]").getAttribute("data-section");
    t.check(current === section, `the navigation marks ${section} as current, not ${current}`);
    if (section === "overview") {
      // Before the first samples too, every tile shows a value or a dash.
      await page.locator(".stat").first().waitFor();
      const values = await page.locator(".stat .stat-value").allInnerTexts();
      t.check(values.every((text) => text.trim() !== ""), `every overview tile shows a value or a dash: ${JSON.stringify(values)}`);
    }
    await t.shoot(section);
  }
  await t.open("/console#/no/such/page");
  await page.getByText("There is no console page at /no/such/page.").waitFor();
  await t.shoot("unknown-route", { variants: ["light"] });
}

/** (c) The headers of the console's files, and a Content-Security-Policy the browser enforces. */
async function headers(t) {
  const { page } = t;
  const response = await t.open("/console");
  t.check(response !== null, "/console was loaded");
  const policy = response.headers()["content-security-policy"] || "";
  for (const directive of CSP_DIRECTIVES) {
    t.check(policy.includes(directive), `/console's Content-Security-Policy has ${directive}: ${policy}`);
  }
  await page.getByLabel("Admin token").waitFor();
  t.check(t.consoleFiles.length >= 4, `the page loaded its files (${t.consoleFiles.map((f) => f.url).join(", ")})`);

  // An inline script is refused, and the refusal reaches the error collector every flow relies on.
  const violated = await page.evaluate(
    () =>
      new Promise((resolve) => {
        document.addEventListener("securitypolicyviolation", (event) => resolve(event.effectiveDirective), { once: true });
        const script = document.createElement("script");
        script.textContent = "window.inlineScriptRan = true;";
        document.body.append(script);
        setTimeout(() => resolve(null), 2000);
      }),
  );
  t.check(violated === "script-src-elem", `an inline script violates script-src-elem (reported: ${violated})`);
  t.check(!(await page.evaluate(() => window.inlineScriptRan === true)), "the inline script did not run");
  await t.expectError(/Content Security Policy/, "the refused inline script is reported as a console error");
}

/** (d) A prompt through the Register page, and its generation followed live to ready. */
async function registerPrompt(t) {
  const { page } = t;
  t.check(PROMPT, "set CONSOLE_E2E_PROMPT: this flow registers a server from a prompt the daemon's LLM answers");
  await t.logIn();
  await page.locator("#nav").getByRole("link", { name: "Register" }).click();
  await t.loggedIn("register");
  await page.getByRole("radio", { name: "Prompt", exact: true }).check();
  await page.getByRole("textbox", { name: "Prompt", exact: true }).fill(PROMPT);
  await page.getByRole("textbox", { name: "Id (optional)", exact: true }).fill(GENERATED);
  await t.shoot("register");

  // Every stage the stepper shows as current, in order, as the page draws it.
  await page.evaluate(() => {
    window.e2eStagesSeen = [];
    const note = () => {
      const stage = document.querySelector('ol.stepper li.step[aria-current="step"]')?.dataset.stage;
      const seen = window.e2eStagesSeen;
      if (stage && seen[seen.length - 1] !== stage) seen.push(stage);
    };
    new MutationObserver(note).observe(document.getElementById("main"), { childList: true, subtree: true, attributes: true });
  });
  await page.getByRole("button", { name: "Register and generate" }).click();
  await page.waitForURL((url) => url.hash.startsWith(`#/servers/${GENERATED}/progress/`));
  await page.getByRole("heading", { level: 1, name: /^Generation of / }).waitFor();

  // Mid-way: a running stage is current (the test's LLM holds the planner for a moment). The job
  // first waits for a worker to claim it, which on a loaded machine can outlast the page's first
  // draw, so `pending` may be current before that.
  const current = page.locator('ol.stepper li.step[aria-current="step"]');
  await page.waitForFunction(
    () => {
      const stage = document.querySelector('ol.stepper li.step[aria-current="step"]')?.dataset.stage;
      return stage !== undefined && stage !== "pending";
    },
    null,
    { timeout: GENERATION_TIMEOUT_MS },
  );
  const stage = await current.getAttribute("data-stage");
  t.check(RUNNING_STAGES.includes(stage), `a running stage is current mid-way, not ${stage}`);
  t.check(await current.evaluate((li) => li.classList.contains("step-current")), "the current stage is drawn as current");
  await t.shoot("progress-running");

  // The end: ready, every stage done with its time, the tokens and the model.
  await page.locator('ol.stepper li.step[data-stage="final"].step-done').waitFor({ timeout: GENERATION_TIMEOUT_MS });
  const seen = await page.evaluate(() => window.e2eStagesSeen);
  const running = seen.filter((s) => RUNNING_STAGES.includes(s));
  t.check(running.length >= 1, `the page showed a running stage as current (saw ${seen.join(" → ") || "none"})`);
  const order = running.map((s) => RUNNING_STAGES.indexOf(s));
  t.check(order.every((n, i) => i === 0 || n > order[i - 1]), `the stages advanced in order: ${seen.join(" → ")}`);
  t.notes.add(`register-prompt: the progress page showed as current ${seen.join(" → ")}`);
  t.check((await current.count()) === 0, "no stage is current once the generation has finished");
  await page.locator(".progress-head .page-heading .badge", { hasText: /^ready$/ }).waitFor();
  for (const done of RUNNING_STAGES) {
    const step = page.locator(`ol.stepper li.step[data-stage="${done}"]`);
    t.check(await step.evaluate((li) => li.classList.contains("step-done")), `${done} is done`);
    const took = (await step.locator(".step-time").innerText()).trim();
    t.check(/\d/.test(took), `${done} shows how long it took (${JSON.stringify(took)})`);
  }
  const total = await page.locator('ol.stepper li.step[data-stage="final"] .step-time').innerText();
  t.check(/^total \d/.test(total.trim()), `the final step shows the total time (${JSON.stringify(total)})`);
  const fact = (term) => page.locator("dl.facts").locator(`dt:text-is("${term}") + dd`);
  const tokens = await fact("Tokens").innerText();
  t.check(/\d.* in · \d.* out · 3 requests/.test(tokens), `the token usage of one plan and two handlers is shown (${tokens})`);
  t.check((await fact("Model").innerText()).includes("test-model"), "the model is shown");
  await t.until(
    async () => /Generation finished/.test(await page.locator("#progress-announcer").textContent()),
    "the end of the generation is announced",
  );
  const tools = await page.locator(".progress-outcome ul.tool-links a").allInnerTexts();
  t.check(tools.join(",") === "get_item,add", `the result lists the generated tools (${tools.join(", ")})`);
  await t.shoot("progress-ready");

  await page.getByRole("link", { name: "Open the server" }).click();
  await page.waitForURL((url) => url.hash === `#/servers/${GENERATED}`);
  await page.getByRole("heading", { level: 3, name: "get_item", exact: true }).waitFor();
  await t.shoot("server");
}

/** (e) The generated tool's page: its highlighted handler, a call through the form, the call in
 * the log with its outbound request, and arguments the API refuses. */
async function tryTool(t) {
  const { page } = t;
  await t.needGenerated();
  await t.logIn();
  await t.openGenerated();
  await t.openTool("get_item");
  const handler = page.locator('section[aria-labelledby="sv-handler-h"] pre code');
  await handler.locator("span[class^='hljs-']").first().waitFor();
  t.check((await handler.innerText()).includes("fetch("), "the handler's code is shown");

  const text = await t.callTool({ id: 1 });
  const result = page.locator("#call-result");
  t.check(text.includes('"title": "Item 1"') && text.includes('"author": "alice"'), `the result shows the upstream's item: ${text}`);
  await result.locator(".badge", { hasText: "ok" }).first().waitFor();
  await t.shoot("tool-result");

  // The execution id leads to the call, expanded and marked, with its request to the API.
  const link = result.locator("a.sv-execution-link");
  const execution = (await link.innerText()).trim();
  await link.click();
  await page.waitForURL((url) => url.hash.startsWith(`#/servers/${GENERATED}/calls?execution_id=`));
  const row = page.locator(`tr.call-row[data-execution-id="${execution}"]`);
  await row.waitFor();
  t.check(await row.evaluate((tr) => tr.classList.contains("highlight")), "the linked call is highlighted");
  t.check((await row.locator(".call-toggle").getAttribute("aria-expanded")) === "true", "the linked call is expanded");
  const detail = page.locator("tbody.call", { has: row }).locator("tr.call-detail");
  await detail.getByRole("heading", { name: "Outbound requests (1)" }).waitFor();
  const request = detail.locator("table.egress-table tbody tr");
  t.check((await request.count()) === 1, "one outbound request");
  const requestText = await request.innerText();
  t.check(/GET api\.weather\.test(:\d+)?\/items\/1/.test(requestText), `the request went to the whitelisted host: ${requestText}`);
  t.check(/allowed/.test(requestText) && /\b200\b/.test(requestText), `the request was allowed and answered 200: ${requestText}`);
  await t.shoot("calls-execution");

  // Arguments that do not fit the schema: the API's 422 message next to the form.
  await page.goBack();
  await page.getByRole("heading", { level: 1, name: "get_item" }).waitFor();
  await page.getByRole("button", { name: "Edit as raw JSON" }).click();
  await page.getByRole("textbox", { name: "Arguments (JSON)" }).fill('{"id": "one"}');
  const refused = t.apiResponses.length;
  await page.getByRole("button", { name: "Call tool" }).click();
  const error = page.locator(".sv-call-status .error-box");
  await error.waitFor();
  const message = await error.innerText();
  t.check(/Error 422/.test(message), `the refusal shows its status: ${message}`);
  t.check(/id: "one" is not of type "integer"/.test(message), `the API's message says what is wrong: ${message}`);
  t.check(
    t.apiResponses.slice(refused).some((r) => r.status === 422 && r.url.endsWith("/tools/get_item/call")),
    "the API answered 422",
  );
  t.check(await result.isHidden(), "no result is shown for a refused call");
  await t.shoot("tool-refused");
}

/** (f) The call log's filters: by tool and by outcome, kept in the address and over a reload. */
async function callLog(t) {
  const { page } = t;
  await t.needGenerated();
  await t.logIn();
  await t.openGenerated();
  // A call of the other tool, and one the upstream fails (it has no item -1).
  await t.openTool("add");
  t.check((await t.callTool({ a: 2, b: 3 })).includes("5"), "add answers 5");
  const crumbs = page.getByRole("navigation", { name: "Breadcrumb" });
  await crumbs.getByRole("link", { name: "Tools", exact: true }).click();
  await page.getByRole("heading", { level: 3, name: "get_item", exact: true }).getByRole("link").click();
  await page.getByRole("heading", { level: 1, name: "get_item" }).waitFor();
  const failed = await t.callTool({ id: -1 });
  t.check(/error/.test(failed), `a failing call shows its outcome: ${failed}`);

  // To the log from the server's page, unfiltered.
  await crumbs.getByRole("link").nth(1).click();
  await page.waitForURL((url) => url.hash === `#/servers/${GENERATED}`);
  await page.getByRole("link", { name: "Call log" }).click();
  await page.getByRole("heading", { level: 1, name: /^Call log of / }).waitFor();
  const rows = page.locator("tr.call-row");
  const tools = () => rows.locator('td[data-label="Tool"]').allInnerTexts();
  const outcomes = () => rows.evaluateAll((trs) => trs.map((tr) => [...tr.classList].find((c) => c.startsWith("outcome-")).slice(8)));
  await t.until(async () => (await tools()).includes("add"), "the log lists the call of add");
  const all = await rows.count();
  t.check(all >= 3, `the log lists every call (${all})`);
  await t.shoot("calls");

  const filters = page.getByRole("search", { name: "Filter calls" });
  await filters.getByLabel("Tool", { exact: true }).selectOption("get_item");
  await page.waitForURL((url) => new URLSearchParams(url.hash.split("?")[1]).get("tool") === "get_item");
  await t.until(async () => {
    const shown = await tools();
    return shown.length > 0 && shown.length < all && shown.every((tool) => tool === "get_item");
  }, "filtering by tool leaves only the calls of get_item");
  await filters.getByLabel("Outcome", { exact: true }).selectOption("error");
  await filters.getByRole("button", { name: "Apply filters" }).click();
  const wanted = (url) => {
    const query = new URLSearchParams(url.hash.split("?")[1]);
    return query.get("tool") === "get_item" && query.get("outcome") === "error";
  };
  await page.waitForURL(wanted);
  const filtered = async () => {
    const [shownTools, shownOutcomes] = [await tools(), await outcomes()];
    return shownTools.length === 1 && shownTools[0] === "get_item" && shownOutcomes[0] === "error";
  };
  await t.until(filtered, "filtering by outcome leaves the one failed call of get_item");
  await page.getByRole("status").filter({ hasText: "matching the filters" }).waitFor();
  await t.shoot("calls-filtered");

  // A reload (or a shared link) shows the same view.
  await page.reload();
  await page.getByRole("heading", { level: 1, name: /^Call log of / }).waitFor();
  t.check(wanted(new URL(page.url())), `the reload keeps the filters in the address (${page.url()})`);
  t.check((await filters.getByLabel("Tool", { exact: true }).inputValue()) === "get_item", "the tool filter survives a reload");
  t.check((await filters.getByLabel("Outcome", { exact: true }).inputValue()) === "error", "the outcome filter survives a reload");
  await t.until(filtered, "after a reload the list is filtered as before");

  // These calls were made without an OAuth token: no caller column, and no caller in the details.
  t.check((await page.locator("table.calls-table thead th", { hasText: "Caller" }).count()) === 0, "calls without a subject add no caller column");
  await rows.first().locator(".call-toggle").click();
  const facts = page.locator("tbody.call", { has: rows.first() }).locator("dl.call-facts");
  await facts.waitFor();
  t.check((await facts.locator("dt", { hasText: /^Caller$/ }).count()) === 0, "a call without a subject shows no caller");

  // This daemon takes no OAuth tokens ([auth.oauth] is not configured), so the caller of an OAuth
  // call is added to the API's answer here: its subject and client id, and a script's tool call's.
  const callsApi = (url) => url.pathname === `/admin/servers/${GENERATED}/calls`;
  await page.route(
    callsApi,
    async (route) => {
      const response = await route.fetch();
      const body = await response.json();
      const [first, ...rest] = body.calls;
      const caller = { subject: "user-42@example.test", client_id: "e2e-client" };
      const child = { ...first, ...caller, execution_id: `${first.execution_id}-child`, parent_execution_id: first.execution_id, children: [] };
      await route.fulfill({ response, json: { ...body, calls: [{ ...first, ...caller, children: [child] }, ...rest] } });
    },
  );
  await page.reload();
  await page.getByRole("heading", { level: 1, name: /^Call log of / }).waitFor();
  await page.locator("table.calls-table thead th", { hasText: "Caller" }).waitFor();
  const callerCell = (await rows.first().locator('td[data-label="Caller"]').innerText()).trim();
  t.check(callerCell === "user-42@example.test via e2e-client", `the caller column shows the subject and the client (${callerCell})`);
  await rows.first().locator(".call-toggle").click();
  const detail = page.locator("tbody.call", { has: rows.first() }).locator("tr.call-detail");
  const callerFact = detail.locator("dl.call-facts").first().locator('dt:text-is("Caller") + dd');
  await callerFact.waitFor();
  const callerText = (await callerFact.innerText()).trim();
  t.check(callerText === "user-42@example.test with the OAuth client e2e-client", `the details name the caller (${callerText})`);
  const childSummary = (await detail.locator("details.child-call > summary").innerText()).trim();
  t.check(childSummary.includes("by user-42@example.test via e2e-client"), `a script's tool call names its caller (${childSummary})`);
  await t.shoot("calls-caller", { variants: ["light", "mobile"] });
  await page.unroute(callsApi);
}

/** (g) Regenerating makes version 2; the diff shows the handler's change; version 1 is activated again. */
async function versionDiff(t) {
  const { page } = t;
  await t.needGenerated();
  await t.logIn();
  await page.locator(`tr[data-server-id="${GENERATED}"]`).waitFor();
  await t.shoot("servers");
  await t.openGenerated();
  await t.openTab("Versions");
  // The same prompt and documents would be answered from the generation cache: force.
  await page.getByRole("checkbox", { name: "Force (skip the generation cache)" }).check();
  await page.getByRole("button", { name: "Regenerate", exact: true }).click();
  await page.waitForURL((url) => url.hash.startsWith(`#/servers/${GENERATED}/progress/`));
  await page.locator('ol.stepper li.step[data-stage="final"].step-done').waitFor({ timeout: GENERATION_TIMEOUT_MS });
  await page.locator(".progress-head .page-heading .badge", { hasText: /^ready$/ }).waitFor();
  t.check((await page.locator(".progress-sub").innerText()).includes("Version 2"), "the regeneration made version 2");

  await page.getByRole("link", { name: "Open the server" }).click();
  await page.waitForURL((url) => url.hash === `#/servers/${GENERATED}`);
  await t.openTab("Versions");
  const version = (n) => page.locator("table.sv-versions tbody tr", { has: page.locator("strong", { hasText: new RegExp(`^v${n}$`) }) });
  await version(2).locator(".badge", { hasText: /^active$/ }).waitFor();
  await t.shoot("versions");

  const picker = page.getByRole("region", { name: "Compare versions" });
  await picker.getByLabel("From", { exact: true }).selectOption("1");
  await picker.getByLabel("To", { exact: true }).selectOption("2");
  await picker.getByRole("link", { name: "Show diff" }).click();
  await page.waitForURL((url) => url.hash === `#/servers/${GENERATED}/versions/1/diff/2`);
  await page.getByRole("heading", { level: 1, name: "Version 1 → 2" }).waitFor();
  await page.getByRole("heading", { level: 2, name: "Changed tools" }).waitFor();
  const changed = page.locator("article.sv-changed-tool", { has: page.getByRole("heading", { level: 3, name: "get_item" }) });
  await changed.getByRole("heading", { level: 4, name: "Handler" }).waitFor();
  const added = changed.locator(".hljs-addition");
  await added.first().waitFor();
  t.check((await added.allInnerTexts()).some((line) => line.includes("score")), "the diff adds the handler's new line");
  t.check((await changed.locator(".hljs-deletion").count()) >= 1, "the diff removes the handler's old line");
  t.check((await page.locator("article.sv-changed-tool").count()) === 1, "only get_item changed");
  await t.shoot("diff");

  // Back to version 1.
  await page.getByRole("link", { name: "Back to versions" }).click();
  await page.getByRole("heading", { name: "Versions", level: 2, exact: true }).waitFor();
  await page.getByRole("button", { name: "Activate version 1" }).click();
  const dialog = page.getByRole("dialog");
  await dialog.waitFor();
  await t.shoot("activate-dialog", { variants: ["light"], fullPage: false });
  await dialog.getByRole("button", { name: "Activate version 1" }).click();
  await version(1).locator(".badge", { hasText: /^active$/ }).waitFor();
  t.check((await version(2).locator(".badge", { hasText: /^active$/ }).count()) === 0, "version 2 is no longer active");
  await version(2).getByRole("button", { name: "Activate version 2" }).waitFor();
  const { body } = await t.api(`/admin/servers/${GENERATED}/versions`);
  t.check(body.active_version === 1, `the API serves version 1 (${body.active_version})`);
  await t.shoot("versions-rolled-back");
}

/** (h) Who may connect to a server, on its Settings tab: the daemon's default, OAuth refused by
 * a daemon without [auth.oauth], and opening a server that has an access token (confirmed first). */
async function serverAuth(t) {
  const { page } = t;
  t.check(SERVER, "set CONSOLE_E2E_SERVER: this flow changes who may connect to that server");
  await t.logIn();
  await page.locator(`tr[data-server-id="${SERVER}"]`).getByRole("link").first().click();
  await page.waitForURL((url) => url.hash === `#/servers/${SERVER}`);
  await t.openTab("Settings", SERVER);
  const section = page.getByRole("region", { name: "Who may connect" });
  const now = async () => (await section.locator(".sv-auth-now").innerText()).trim();
  const showing = async (pattern, what) => {
    let shown = "";
    await t.until(async () => pattern.test((shown = await now())), what).catch((error) => {
      throw new Error(`${error.message}; the section shows ${JSON.stringify(shown)}`);
    });
  };
  const radio = (name) => section.getByRole("radio", { name, exact: true });
  const scopes = section.getByRole("textbox", { name: "Extra scopes for OAuth (optional)" });
  const apply = section.getByRole("button", { name: "Apply", exact: true });

  // By default: open, as the daemon decides.
  await section.locator(".sv-auth-now").waitFor();
  t.check((await now()) === "Open (daemon default)", `the section shows the daemon's default, open (${await now()})`);
  t.check(await radio("Daemon default").isChecked(), "the daemon default is the current choice");
  t.check(await scopes.isDisabled(), "the scopes field waits for OAuth to be chosen");
  await page.locator(".sv-header").getByText("open to anyone", { exact: true }).waitFor();
  await t.shoot("settings-auth");

  // OAuth, by keyboard: this daemon has no [auth.oauth], and the API's 422 says so.
  await radio("Daemon default").focus();
  await page.keyboard.press("ArrowDown");
  await page.keyboard.press("ArrowDown");
  t.check(await radio("OAuth sign-in").isChecked(), "the arrow keys choose OAuth");
  t.check(await scopes.isEnabled(), "choosing OAuth enables the scopes field");
  await page.keyboard.press("Tab");
  t.check(await scopes.evaluate((input) => input === document.activeElement), "Tab moves from the choices to the scopes");
  await page.keyboard.type("billing, reports");
  const asked = t.apiResponses.length;
  await page.keyboard.press("Enter");
  const error = section.locator(".error-box");
  await error.waitFor();
  const message = await error.innerText();
  t.check(/Error 422/.test(message) && message.includes("[auth.oauth]"), `the API's message says the daemon needs [auth.oauth]: ${message}`);
  t.check(
    t.apiResponses.slice(asked).some((r) => r.status === 422 && r.url.endsWith(`/admin/servers/${SERVER}/auth`)),
    "the API answered 422",
  );
  let { body } = await t.api(`/admin/servers/${SERVER}`);
  t.check(body.auth.mode === "open" && body.auth.source === "default", `nothing changed: ${JSON.stringify(body.auth)}`);
  await t.shoot("settings-auth-refused", { variants: ["light"] });

  // An access token set on the same tab: the section says so at once.
  await page.locator("#token-value").fill("e2e-static-access-token-0123");
  await page.getByRole("button", { name: "Set token" }).click();
  await page.locator("#token-once").waitFor();
  await showing(/^Static access token$/, "after setting a token the section shows the static access token");
  t.check((await section.getByRole("radio", { checked: true }).count()) === 0, "no choice is current while a token is in force");
  await page.locator(".sv-header").getByText("access token required", { exact: true }).waitFor();

  // Opening it removes the token: asked first; cancelling changes nothing.
  await radio("Open").check();
  await apply.click();
  const dialog = page.getByRole("dialog");
  await dialog.getByRole("heading", { name: "Remove the access token and open the server?" }).waitFor();
  await t.shoot("auth-confirm", { variants: ["light", "mobile"], fullPage: false });
  await dialog.getByRole("button", { name: "Cancel" }).click();
  await dialog.waitFor({ state: "detached" });
  ({ body } = await t.api(`/admin/servers/${SERVER}`));
  t.check(body.access_token_set === true && body.auth.mode === "access_token", `cancelling keeps the token: ${JSON.stringify(body.auth)}`);
  await apply.click();
  await dialog.getByRole("button", { name: "Remove token and open" }).click();
  await showing(/^Open$/, "after opening, the section shows open, set on the server");
  const token = page.getByRole("region", { name: "Access token" });
  const tokenState = (await token.locator("#token-state").innerText()).trim();
  t.check(tokenState.startsWith("not set"), `the access-token section shows no token (${tokenState})`);
  t.check((await page.locator("#token-remove").count()) === 0, "there is no token to remove");
  t.check(await radio("Open").isChecked(), "open is the current choice");
  ({ body } = await t.api(`/admin/servers/${SERVER}`));
  t.check(
    body.access_token_set === false && body.auth.mode === "open" && body.auth.source === "server",
    `the API has the server open without a token: ${JSON.stringify(body)}`,
  );
  await t.shoot("settings-auth-open");

  // Back to the daemon's default (still open): nothing to confirm.
  await radio("Daemon default").check();
  await apply.click();
  await showing(/^Open \(daemon default\)$/, "back to the daemon's default");
  t.check((await page.getByRole("dialog").count()) === 0, "going from open to an open default asks nothing");
  ({ body } = await t.api(`/admin/servers/${SERVER}`));
  t.check(body.auth.source === "default", `the API has the default again: ${JSON.stringify(body.auth)}`);
}

/** (i) Deleting the server from its Settings tab, after typing its id. */
async function deleteServer(t) {
  const { page } = t;
  await t.needGenerated();
  await t.logIn();
  await t.openGenerated();
  await t.openTab("Settings");
  await t.shoot("settings");
  await page.getByRole("button", { name: "Delete server" }).click();
  const dialog = page.getByRole("dialog");
  const confirm = dialog.getByRole("button", { name: "Delete server" });
  const typed = dialog.getByRole("textbox", { name: `Type ${GENERATED} to confirm` });
  await typed.waitFor();
  t.check(await confirm.isDisabled(), "the dialog's button is disabled until the id is typed");
  await typed.fill(GENERATED.slice(0, -1));
  t.check(await confirm.isDisabled(), "a part of the id does not enable the button");
  await typed.fill(GENERATED);
  t.check(await confirm.isEnabled(), "the typed id enables the button");
  await t.shoot("delete-dialog", { variants: ["light", "mobile"], fullPage: false });
  await confirm.click();
  await page.waitForURL((url) => url.hash === "#/servers");
  await t.loggedIn("servers");
  if (SERVER) await page.locator(`tr[data-server-id="${SERVER}"]`).waitFor();
  t.check((await page.locator(`tr[data-server-id="${GENERATED}"]`).count()) === 0, "the server is gone from the list");
  const { status } = await t.api(`/admin/servers/${GENERATED}`);
  t.check(status === 404, `the API no longer has the server (${status})`);
  await t.shoot("servers-after-delete");
}

/** (j) The overview's charts, with the calls the flows above made. */
async function overview(t) {
  const { page } = t;
  await t.logIn();
  await page.locator("#nav").getByRole("link", { name: "Overview" }).click();
  await t.loggedIn("overview");
  const chart = page.locator("figure.chart", { has: page.getByRole("heading", { name: "Calls per second" }) });
  const surface = chart.locator(".chart-surface");
  // The daemon samples every 5 s and the page asks every 5 s: the calls show within a few samples.
  const highest = await t.until(
    async () => {
      const label = (await surface.getAttribute("aria-label")) || "";
      const match = /highest ([\d.,]+)\/s/.exec(label);
      return match && Number(match[1].replace(",", ".")) > 0 ? match[1] : null;
    },
    "the calls-per-second chart shows the calls made",
    OVERVIEW_TIMEOUT_MS,
  );
  t.check((await surface.locator("path.chart-line").count()) >= 1, `the chart draws a line (highest ${highest}/s)`);
  // The latency of the intervals with calls: a line, or a dot for a lone interval.
  const latency = page.locator("figure.chart", { has: page.getByRole("heading", { name: "Latency" }) }).locator(".chart-surface");
  t.check((await latency.locator("path.chart-line, circle.chart-dot").count()) >= 1, "the latency chart shows the calls' latency");
  // Each tile has its value, or a dash when there is none.
  const values = await page.locator(".stat .stat-value").allInnerTexts();
  t.check(values.length === 9 && values.every((text) => text.trim() !== ""), `every tile shows a value: ${JSON.stringify(values)}`);
  await t.shoot("overview");
}

/** Gives `flow` the name the report, CONSOLE_E2E_FLOWS and the screenshots use. */
function named(name, flow) {
  Object.defineProperty(flow, "name", { value: name });
  return flow;
}

// In this order: the flows from register-prompt to delete share the server register-prompt makes.
const FLOWS = [
  login,
  navigation,
  headers,
  named("register-prompt", registerPrompt),
  named("try-tool", tryTool),
  named("call-log", callLog),
  named("version-diff", versionDiff),
  named("server-auth", serverAuth),
  named("delete", deleteServer),
  overview,
];

// ---------------------------------------------------------------------------------------------
// The harness

/** One flow's browser context, page and records. */
class Visit {
  constructor(flow, context, page) {
    this.flow = flow;
    this.context = context;
    this.page = page;
    this.errors = [];
    this.failures = [];
    this.requested = [];
    this.apiResponses = [];
    this.consoleFiles = [];
    this.notes = new Set();
    this.shots = 0;
    page.setDefaultTimeout(STEP_TIMEOUT_MS);
    page.on("console", (message) => {
      if (message.type() !== "error") return;
      const at = message.location().url || "";
      // The API's refusals (a 401 before logging in, a 403 for a wrong token, a 404 for an unknown
      // server) are answers the console shows; Chromium logs each as a failed resource load.
      if (/status of 4\d\d/.test(message.text()) && at.startsWith(`${ORIGIN}/admin/`)) return;
      this.errors.push(`console error: ${message.text()}${at ? ` (${at})` : ""}`);
    });
    page.on("pageerror", (error) => this.errors.push(`uncaught: ${error.stack || error.message}`));
    context.on("request", (request) => {
      const url = request.url();
      this.requested.push(url);
      if (url.includes(TOKEN)) this.failures.push(`the admin token appears in a requested URL: ${url}`);
      if (!url.startsWith("data:") && new URL(url).origin !== ORIGIN) this.failures.push(`a request left the daemon: ${url}`);
    });
    context.on("response", async (response) => {
      const url = response.url();
      const status = response.status();
      if (url.startsWith(`${ORIGIN}/admin/`)) {
        this.apiResponses.push({ url, status });
        if (status >= 500) this.failures.push(`the API answered ${status} to ${url}`);
      } else if (url.startsWith(`${ORIGIN}/console`)) {
        const headers = await response.allHeaders().catch(() => ({}));
        this.consoleFiles.push({ url, status });
        if (status >= 400) this.failures.push(`${status} for the console file ${url}`);
        else if (!(headers["content-security-policy"] || "").includes("default-src 'none'")) {
          this.failures.push(`no Content-Security-Policy on ${url}`);
        }
      }
    });
  }

  check(condition, message) {
    if (!condition) throw new Error(message);
  }

  /** Loads `path` of the daemon; returns the response (null when only the hash changed). */
  async open(path) {
    const response = await this.page.goto(`${URL_}${path}`);
    this.check(response === null || response.ok(), `GET ${path} answered ${response?.status()}`);
    return response;
  }

  async storedToken() {
    return this.page.evaluate(() => sessionStorage.getItem("mcpbootd.adminToken"));
  }

  /** Logs in through the form, as an operator would. */
  async logIn() {
    await this.open("/console#/login");
    await this.page.getByLabel("Admin token").fill(TOKEN);
    await this.page.getByRole("button", { name: "Log in" }).click();
    await this.page.waitForURL((url) => !url.hash.startsWith("#/login"), { timeout: STEP_TIMEOUT_MS });
    await this.loggedIn("servers");
  }

  /** Waits until the page of `section` shows, logged in: the navigation, and the page's heading. */
  async loggedIn(section) {
    await this.page.locator("#nav").waitFor();
    await this.page.getByRole("button", { name: "Log out" }).waitFor();
    const title = { servers: "Servers", register: "Register", overview: "Overview" }[section];
    if (title) await this.page.getByRole("heading", { name: title, level: 1 }).waitFor();
  }

  /** Screenshots of the current page, `<flow>-<name>-<variant>.png`; of the viewport alone with
   * `fullPage: false` (a modal dialog's backdrop covers the viewport, not the whole page). */
  async shoot(name, { variants = VARIANTS.map(([variant]) => variant), fullPage = true } = {}) {
    for (const [variant, viewport, colorScheme] of VARIANTS) {
      if (!variants.includes(variant)) continue;
      await this.page.setViewportSize(viewport);
      await this.page.emulateMedia({ colorScheme });
      // Two frames: the new size and colors are laid out and painted.
      await this.page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
      await this.page.screenshot({ path: join(SCREENSHOTS, `${this.flow}-${name}-${variant}.png`), fullPage });
      this.shots += 1;
    }
    await this.page.setViewportSize(VARIANTS[0][1]);
    await this.page.emulateMedia({ colorScheme: VARIANTS[0][2] });
  }

  /** Polls `condition` (async, returning a truthy value) until it holds; fails with `message`. */
  async until(condition, message, timeoutMs = STEP_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const value = await condition();
      if (value) return value;
      if (Date.now() > deadline) throw new Error(`${message} (waited ${timeoutMs / 1000} s)`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** The admin API from this script (not the page): `{status, body}` of a GET. */
  async api(path) {
    const response = await fetch(`${URL_}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const text = await response.text();
    let body = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON: kept as text
    }
    return { status: response.status, body };
  }

  /** Fails at once, saying why, when the server the register-prompt flow makes is not there. */
  async needGenerated() {
    const { status } = await this.api(`/admin/servers/${GENERATED}`);
    this.check(status === 200, `server ${GENERATED} is not registered (${status}): this flow needs the register-prompt flow first`);
  }

  /** From the Servers page: the generated server's page, by its row's link. */
  async openGenerated() {
    const row = this.page.locator(`tr[data-server-id="${GENERATED}"]`);
    await row.getByRole("link").first().click();
    await this.page.waitForURL((url) => url.hash === `#/servers/${GENERATED}`);
    await this.page.getByRole("navigation", { name: "Server sections" }).waitFor();
  }

  /** On a server page (the generated server's unless `server` says another): one of its tabs, by its link. */
  async openTab(name, server = GENERATED) {
    await this.page.getByRole("navigation", { name: "Server sections" }).getByRole("link", { name, exact: true }).click();
    await this.page.waitForURL((url) => url.hash === `#/servers/${server}/${name.toLowerCase()}`);
    await this.page.getByRole("heading", { name, level: 2, exact: true }).waitFor();
  }

  /** On a server page: the tool page of `tool`, from the Tools tab. */
  async openTool(tool) {
    await this.openTab("Tools");
    await this.page.getByRole("heading", { level: 3, name: tool, exact: true }).getByRole("link").click();
    await this.page.getByRole("heading", { level: 1, name: tool }).waitFor();
  }

  /** On a tool page: fills the form's fields by name and calls the tool; returns the result's text. */
  async callTool(values) {
    const { page } = this;
    for (const [name, value] of Object.entries(values)) {
      await page.getByRole("spinbutton", { name, exact: true }).fill(String(value));
    }
    await page.getByRole("button", { name: "Call tool" }).click();
    const result = page.locator("#call-result");
    await result.locator("a.sv-execution-link").waitFor();
    return result.innerText();
  }

  /** Removes the collected console error matching `pattern`, which the flow caused on purpose. */
  async expectError(pattern, what) {
    for (let waited = 0; waited < STEP_TIMEOUT_MS; waited += 50) {
      const index = this.errors.findIndex((error) => pattern.test(error));
      if (index >= 0) {
        this.errors.splice(index, 1);
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error(`${what}: no console error matched ${pattern}`);
  }
}

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`error: set ${name} (see the top of console/e2e/console.test.mjs)`);
    process.exit(2);
  }
  return value;
}

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// ---------------------------------------------------------------------------------------------
// The run

const started = Date.now();
mkdirSync(SCREENSHOTS, { recursive: true });
const unknown = ONLY.filter((name) => !FLOWS.some((flow) => flow.name === name));
if (unknown.length > 0) {
  console.error(`error: no flow ${unknown.join(", ")}; the flows are ${FLOWS.map((flow) => flow.name).join(", ")}`);
  process.exit(2);
}
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  // Chromium's sandbox refuses to start as root (as in CI); as another user it stays on.
  args: process.getuid?.() === 0 ? ["--no-sandbox"] : [],
});
console.log(`chromium ${browser.version()} against ${URL_}; screenshots in ${SCREENSHOTS}`);

const failed = [];
let passed = 0;
for (const flow of FLOWS.filter((flow) => ONLY.length === 0 || ONLY.includes(flow.name))) {
  const context = await browser.newContext({ viewport: VARIANTS[0][1], colorScheme: VARIANTS[0][2] });
  const page = await context.newPage();
  const visit = new Visit(flow.name, context, page);
  const flowStarted = Date.now();
  let error = null;
  try {
    await withTimeout(flow(visit), FLOW_TIMEOUT_MS, `flow ${flow.name}`);
    // Late errors: anything the last page did after the flow's final step.
    await page.waitForLoadState("networkidle", { timeout: 2000 }).catch(() => {});
  } catch (cause) {
    error = cause;
  }
  const problems = [...visit.failures, ...visit.errors];
  if (error) problems.unshift(error.stack || String(error));
  const took = `${((Date.now() - flowStarted) / 1000).toFixed(1)} s`;
  for (const note of visit.notes) console.log(`note: ${note}`);
  if (problems.length === 0) {
    passed += 1;
    console.log(`ok   ${flow.name} (${took}, ${visit.requested.length} requests, ${visit.shots} screenshots)`);
  } else {
    failed.push(flow.name);
    const shot = join(SCREENSHOTS, `${flow.name}-failure.png`);
    await page.screenshot({ path: shot, fullPage: true }).catch(() => {});
    console.log(`FAIL ${flow.name} (${took}) at ${page.url()}; screenshot ${shot}`);
    const shown = await page.locator(".error-box").allInnerTexts().catch(() => []);
    for (const text of shown) problems.push(`the page shows: ${text.replaceAll("\n", " / ")}`);
    for (const problem of problems) console.log(`     ${problem.replaceAll("\n", "\n     ")}`);
  }
  await context.close();
}
await browser.close();

console.log(`console e2e: ${passed} passed, ${failed.length} failed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
if (failed.length > 0) {
  console.log(`failed flows: ${failed.join(", ")}`);
  process.exit(1);
}
