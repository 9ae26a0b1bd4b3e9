"""Drives a hosted mcpbootd server with the official MCP Python SDK, the way an MCP host does.

Usage: client.py MCP_URL [auto|legacy|unauthorized]

Expects the server registered by tests/it/sdk_clients.rs: a tool `add` ({a, b} -> {sum, operands})
and a tool `fail` that throws. Connects over Streamable HTTP, lists the tools, calls `add` and
`fail`, and prints one JSON summary line on stdout. Exits non-zero, with the reason on stderr, on
anything unexpected.

The connect mode is the SDK's: `auto` (its default, what hosts built on it do) probes
`server/discover` and speaks protocol 2026-07-28 with a server that answers it, falling back to the
`initialize` handshake otherwise; `legacy` always uses the `initialize` handshake (2025-11-25 and
older).

`unauthorized` connects without the server's access token, expects that to fail, and prints what
the SDK surfaces to the host (the exception text a host shows its user).
"""

import json
import sys
from importlib.metadata import version

from mcp import Client

from harness import Unexpected, check, leaves, report, texts


async def run(url: str, mode: str) -> dict:
    async with Client(url, mode=mode, read_timeout_seconds=20) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        for tool in tools.values():
            print(f"tool {tool.name}: {tool.description}", file=sys.stderr)
        check({"add", "fail"} <= tools.keys(), f"expected tools add and fail, got {sorted(tools)}")
        schema = tools["add"].input_schema
        check(schema.get("type") == "object" and "a" in schema.get("properties", {}), f"add input schema: {schema}")

        added = await client.call_tool("add", {"a": 2, "b": 40})
        check(not added.is_error, f"add failed: {texts(added)}")
        structured = added.structured_content
        check(structured is not None, "add returned no structuredContent")
        check(structured.get("sum") == 42, f"add structuredContent: {structured}")
        # The text content mirrors the structured content as JSON (backwards compatibility).
        check(any(json.loads(text) == structured for text in texts(added)), f"add text content: {texts(added)}")

        failed = await client.call_tool("fail", {"reason": "python"})
        check(failed.is_error is True, f"fail did not return isError: {failed}")
        error_text = "\n".join(texts(failed))
        check("refused: python" in error_text, f"fail error text: {error_text!r}")

        return {
            "sdk": f"python mcp {version('mcp')}",
            "mode": mode,
            "protocol_version": client.protocol_version,
            "server": client.server_info.name if client.server_info else None,
            "server_title": client.server_info.title if client.server_info else None,
            "tools": sorted(tools),
            "structured": structured,
            "error_result": {"isError": failed.is_error, "text": error_text},
        }


async def refused(url: str) -> dict:
    try:
        async with Client(url, read_timeout_seconds=20) as client:
            await client.list_tools()
    except Exception as error:  # noqa: BLE001 - whatever the SDK raises is what a host shows
        shown = "\n".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves(error))
        return {"sdk": f"python mcp {version('mcp')}", "mode": "unauthorized", "shown": shown}
    raise Unexpected("connected and listed tools without the access token")


def main() -> int:
    if len(sys.argv) not in (2, 3) or sys.argv[2:] not in ([], ["auto"], ["legacy"], ["unauthorized"]):
        print("usage: client.py MCP_URL [auto|legacy|unauthorized]", file=sys.stderr)
        return 2
    url, mode = sys.argv[1], (sys.argv[2:] or ["auto"])[0]
    return report(refused(url) if mode == "unauthorized" else run(url, mode))


if __name__ == "__main__":
    sys.exit(main())
