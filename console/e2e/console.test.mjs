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

// Page modules the router names that are still being written: while one is missing from the
// daemon, a flow accepts its absence (the router shows an error box) and a note says so. Take a
// page off this list when it lands, so its absence fails again.
const NOT_WRITTEN_YET = ["servers", "register", "overview"];

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
  if (SERVER && available.get("servers")) await page.locator("#main").getByText(SERVER).first().waitFor();
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
  if (!available.get("overview")) {
    t.notes.add("the refused stored token is checked once js/pages/overview.js asks the API for data");
    return;
  }
  await page.evaluate(() => sessionStorage.setItem("mcpbootd.adminToken", "a-token-from-before"));
  await t.open("/console#/overview");
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

const FLOWS = [login, navigation, headers];

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
      if (this.pending(at)) return;
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
      } else if (url.startsWith(`${ORIGIN}/console`) && !this.pending(url)) {
        const headers = await response.allHeaders().catch(() => ({}));
        this.consoleFiles.push({ url, status });
        if (status >= 400) this.failures.push(`${status} for the console file ${url}`);
        else if (!(headers["content-security-policy"] || "").includes("default-src 'none'")) {
          this.failures.push(`no Content-Security-Policy on ${url}`);
        }
      }
    });
  }

  /** Whether `url` is a page module still being written (see NOT_WRITTEN_YET), noting it if so. */
  pending(url) {
    const match = /\/console\/js\/pages\/([\w-]+)\.js$/.exec(url);
    if (!match || !NOT_WRITTEN_YET.includes(match[1]) || available.get(match[1])) return false;
    this.notes.add(`js/pages/${match[1]}.js is not written yet; its page was accepted as missing`);
    return true;
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
    if (available.get(section) === false) {
      await this.page.locator("#main .error-box").waitFor();
    } else if (title) {
      await this.page.getByRole("heading", { name: title, level: 1 }).waitFor();
    }
  }

  /** Screenshots of the current page, `<flow>-<name>-<variant>.png`. */
  async shoot(name, { variants = VARIANTS.map(([variant]) => variant) } = {}) {
    for (const [variant, viewport, colorScheme] of VARIANTS) {
      if (!variants.includes(variant)) continue;
      await this.page.setViewportSize(viewport);
      await this.page.emulateMedia({ colorScheme });
      // Two frames: the new size and colors are laid out and painted.
      await this.page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done))));
      await this.page.screenshot({ path: join(SCREENSHOTS, `${this.flow}-${name}-${variant}.png`), fullPage: true });
      this.shots += 1;
    }
    await this.page.setViewportSize(VARIANTS[0][1]);
    await this.page.emulateMedia({ colorScheme: VARIANTS[0][2] });
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

/** Which of NOT_WRITTEN_YET the daemon serves: `name → bool`. */
async function availablePages() {
  const found = new Map();
  for (const name of NOT_WRITTEN_YET) {
    const response = await fetch(`${URL_}/console/js/pages/${name}.js`, { method: "HEAD" });
    found.set(name, response.ok);
  }
  return found;
}

// ---------------------------------------------------------------------------------------------
// The run

const started = Date.now();
mkdirSync(SCREENSHOTS, { recursive: true });
const available = await availablePages();
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
