"""Drives a server's `code_execution` tool with the official MCP Python SDK, as an MCP host does.

Usage: code_mode.py MCP_URL

Expects the servers registered by tests/it/code_mode.rs (`news`, whose scripts may also call
`geo`). Lists the tools, runs a script that composes both servers, a script that throws after one
tool call, and prints one JSON summary line on stdout. Exits non-zero, with the reason on stderr,
on anything unexpected.
"""

import sys
from importlib.metadata import version

from mcp import Client

from harness import check, report, texts


COMPOSE = """
const item = await tools.news.get_item({id: input.id});
const place = await call_tool('geo', 'country_of', {city: input.city});
return {title: item.title, country: place.value.country};
"""

THROWS = """
await tools.news.get_item({id: 1});
throw new Error('stop here');
"""


async def run(url: str) -> dict:
    async with Client(url, read_timeout_seconds=20) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        check("code_execution" in tools, f"code_execution is not listed: {sorted(tools)}")
        description = tools["code_execution"].description or ""
        check("declare const tools" in description, "the description declares no tools")
        schema = tools["code_execution"].input_schema
        check(schema.get("required") == ["code"], f"input schema: {schema}")

        composed = await client.call_tool("code_execution", {"code": COMPOSE, "input": {"id": 5, "city": "Lima"}})
        check(not composed.is_error, f"the composing script failed: {texts(composed)}")
        structured = composed.structured_content
        check(structured is not None and structured.get("ok") is True, f"structuredContent: {structured}")
        check(structured["value"] == {"title": "Item 5", "country": "PE"}, f"value: {structured['value']}")
        check(len(structured["calls"]) == 2, f"calls: {structured['calls']}")

        failed = await client.call_tool("code_execution", {"code": THROWS})
        check(failed.is_error is True, f"a throwing script is not an error result: {failed}")
        error = (failed.structured_content or {}).get("error", {})
        check(error.get("code") == "RUNTIME_ERROR" and error.get("line") == 3, f"error: {error}")
        shown = "\n".join(texts(failed))
        check("stop here" in shown, f"the text a host shows lacks the message: {shown!r}")

        return {
            "sdk": f"python mcp {version('mcp')}",
            "description_bytes": len(description),
            "value": structured["value"],
            "calls": [f"{c['server']}.{c['tool']}" for c in structured["calls"]],
            "error": {"code": error.get("code"), "line": error.get("line"), "calls": len(failed.structured_content["calls"])},
        }


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: code_mode.py MCP_URL", file=sys.stderr)
        return 2
    return report(run(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
