// Drives a hosted mcpbootd server with the official MCP TypeScript SDK, the way an MCP host does.
//
// Usage: node client.mjs MCP_URL [unauthorized]
//
// Expects the server registered by tests/it/sdk_clients.rs: a tool `add` ({a, b} -> {sum, operands})
// and a tool `fail` that throws. Connects over Streamable HTTP (initialize handshake), lists the
// tools, calls `add` and `fail`, and prints one JSON summary line on stdout. Exits non-zero, with
// the reason on stderr, on anything unexpected.
//
// `unauthorized` connects without the server's access token, expects that to fail, and prints what
// the SDK surfaces to the host (the error message a host shows its user).

import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

class Unexpected extends Error {}

function check(condition, message) {
  if (!condition) throw new Unexpected(message);
}

const texts = (result) => result.content.filter((item) => item.type === "text").map((item) => item.text);

function sdkVersion() {
  const manifest = new URL("./node_modules/@modelcontextprotocol/sdk/package.json", import.meta.url);
  return JSON.parse(readFileSync(manifest, "utf8")).version;
}

async function run(url) {
  const client = new Client({ name: "mcpbootd-sdk-test", version: "0.0.0" });
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport, { timeout: 20_000 });
  try {
    const { tools } = await client.listTools();
    for (const tool of tools) console.error(`tool ${tool.name}: ${tool.description}`);
    const names = tools.map((tool) => tool.name).sort();
    check(names.includes("add") && names.includes("fail"), `expected tools add and fail, got ${names}`);
    const schema = tools.find((tool) => tool.name === "add").inputSchema;
    check(schema.type === "object" && "a" in (schema.properties ?? {}), `add input schema: ${JSON.stringify(schema)}`);

    const added = await client.callTool({ name: "add", arguments: { a: 2, b: 40 } });
    check(!added.isError, `add failed: ${texts(added)}`);
    const structured = added.structuredContent;
    check(structured !== undefined, "add returned no structuredContent");
    check(structured.sum === 42, `add structuredContent: ${JSON.stringify(structured)}`);
    check(
      texts(added).some((text) => JSON.stringify(JSON.parse(text)) === JSON.stringify(structured)),
      `add text content: ${texts(added)}`,
    );

    const failed = await client.callTool({ name: "fail", arguments: { reason: "typescript" } });
    check(failed.isError === true, `fail did not return isError: ${JSON.stringify(failed)}`);
    const errorText = texts(failed).join("\n");
    check(errorText.includes("refused: typescript"), `fail error text: ${JSON.stringify(errorText)}`);

    return {
      sdk: `typescript @modelcontextprotocol/sdk ${sdkVersion()} on node ${process.version}`,
      protocol_version: transport.protocolVersion ?? null,
      server: client.getServerVersion()?.name ?? null,
      server_title: client.getServerVersion()?.title ?? null,
      tools: names,
      structured,
      error_result: { isError: failed.isError, text: errorText },
    };
  } finally {
    await client.close();
  }
}

async function refused(url) {
  const client = new Client({ name: "mcpbootd-sdk-test", version: "0.0.0" });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(url)), { timeout: 20_000 });
    await client.listTools();
  } catch (error) {
    return { sdk: `typescript @modelcontextprotocol/sdk ${sdkVersion()}`, mode: "unauthorized", shown: String(error) };
  } finally {
    await client.close();
  }
  throw new Unexpected("connected and listed tools without the access token");
}

const [url, mode] = process.argv.slice(2);
if (!url || process.argv.length > 4 || (mode !== undefined && mode !== "unauthorized")) {
  console.error("usage: client.mjs MCP_URL [unauthorized]");
  process.exit(2);
}
try {
  const summary = await (mode === "unauthorized" ? refused(url) : run(url));
  process.stdout.write(JSON.stringify(summary) + "\n");
} catch (error) {
  console.error(error instanceof Unexpected ? `unexpected: ${error.message}` : error);
  process.exit(1);
}
