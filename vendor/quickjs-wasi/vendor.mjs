#!/usr/bin/env node
// Copies the QuickJS WebAssembly module the daemon's sandbox runs, and its licence, from
// node_modules (installed from package-lock.json) into src/serve/isolate/wasm/vendor/, where the daemon
// embeds the module with include_bytes!.
//
//   node vendor.mjs          copy them (and remove files in src/serve/isolate/wasm/vendor/ that are not listed)
//   node vendor.mjs --check  change nothing; exit 1 naming each file that differs, is missing or is extra
//
// The copies are committed, so building the daemon needs no npm; .ci/run runs --check after
// `npm ci` so they cannot drift from the version pinned in the lock file. No dependencies.

import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..");

/** The directory the copies go to; it holds nothing else. */
const target = join(root, "src", "serve", "isolate", "wasm", "vendor");

/** Per package: `{ copy: source }`, the copy under src/serve/isolate/wasm/vendor/ and the file inside the package. */
const VENDORED = [
  {
    package: "quickjs-wasi",
    files: {
      "quickjs.wasm": "quickjs.wasm",
      "quickjs-wasi.LICENSE": "LICENSE",
    },
  },
];

const check = process.argv.includes("--check");
const unknown = process.argv.slice(2).filter((arg) => arg !== "--check");
if (unknown.length > 0) {
  console.error(`usage: node vendor.mjs [--check] (unknown argument ${unknown.join(" ")})`);
  process.exit(2);
}

const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
const problems = [];
const listed = new Set();
let copied = 0;

for (const { package: name, files } of VENDORED) {
  const source = join(here, "node_modules", name);
  const pinned = lock.packages?.[`node_modules/${name}`]?.version;
  if (!pinned) fail(`package-lock.json does not pin ${name}; add it to package.json and run npm install --ignore-scripts`);
  const installed = existsSync(join(source, "package.json"))
    ? JSON.parse(readFileSync(join(source, "package.json"), "utf8")).version
    : null;
  if (installed !== pinned) {
    fail(
      `${name} ${pinned} is pinned in package-lock.json but ${installed ? `${installed} is` : "nothing is"} installed` +
        " in vendor/quickjs-wasi/node_modules; run npm ci --ignore-scripts in vendor/quickjs-wasi/ first",
    );
  }

  for (const [copy, from] of Object.entries(files)) {
    const wanted = await readFile(join(source, from)).catch((error) =>
      fail(`${name} ${pinned} has no ${from} (${error.code}); update the list in vendor.mjs`),
    );
    const path = join(target, copy);
    listed.add(path);
    const shown = display(path);
    const present = existsSync(path) ? await readFile(path) : null;
    if (present !== null && present.equals(wanted)) continue;
    if (check) {
      const origin = `${name} ${pinned} ${from}`;
      problems.push(present === null ? `${shown}: missing (copy of ${origin})` : `${shown}: differs from ${origin}`);
    } else {
      await mkdir(dirname(path), { recursive: true });
      await writeFile(path, wanted);
      copied += 1;
      console.log(`copied ${name} ${pinned} ${from} to ${shown}`);
    }
  }
}

// The directory holds only the copies, so a file left from an older version cannot linger in it.
for (const path of walk(target)) {
  if (listed.has(path)) continue;
  if (check) {
    problems.push(`${display(path)}: extra (not copied by vendor.mjs)`);
  } else {
    await rm(path);
    console.log(`removed ${display(path)}`);
  }
}

const shownTarget = display(target);
if (check) {
  if (problems.length > 0) {
    console.error(`${shownTarget} does not match vendor/quickjs-wasi/package-lock.json:\n  ${problems.join("\n  ")}`);
    console.error("run `node vendor.mjs` in vendor/quickjs-wasi/ (after `npm ci --ignore-scripts`) and commit the result");
    process.exit(1);
  }
  console.log(`${shownTarget} matches package-lock.json (${VENDORED.map((v) => v.package).join(", ")})`);
} else if (copied === 0) {
  console.log(`${shownTarget} was up to date`);
}

/** Every file under `dir`, recursively (none when it does not exist). */
function* walk(dir) {
  if (!existsSync(dir)) return;
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) yield* walk(path);
    else yield path;
  }
}

/** `path` relative to the repository root, with forward slashes. */
function display(path) {
  return relative(root, path).split(sep).join("/");
}

function fail(message) {
  console.error(`error: ${message}`);
  process.exit(1);
}
