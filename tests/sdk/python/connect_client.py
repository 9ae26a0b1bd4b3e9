"""An MCP host whose user has not connected their account yet: signs in to a mount as LOGIN, calls a
tool whose upstream credential is per user, and shows what the official MCP Python SDK makes of
the daemon's URL elicitation. With --retry-after-connect it then opens the connect link in a
browser, goes through both sign-ins, and calls the tool again.

Usage: connect_client.py MCP_URL TOOL LOGIN [--retry-after-connect] [--browser-login OTHER]
                         [--api-key KEY] [--mode auto|legacy] [--no-elicitation]

Run by tests/it/connected_accounts.rs. The sign-in to the mount is oauth_client.py's (the SDK's
OAuthClientProvider from the daemon's 401: resource metadata, provider discovery, dynamic
registration, authorization code + PKCE with the mount's URL as `resource`), with the browser of
connect_browser.py signing in as LOGIN. The host declares the elicitation capability (the SDK
does when it is given an elicitation callback, and then offers both form and URL mode).

A daemon asks for the connection with the JSON-RPC error -32042 (URLElicitationRequiredError,
MCP 2025-11-25), `data.elicitations[0]` = {mode: "url", elicitationId, url, message}. mcp 2.3.0
raises it from `call_tool` as a plain `mcp.MCPError` whose `code` is -32042 and whose `data` is the
raw dict (not the `UrlElicitationRequiredError` subclass, which only servers raise), so that is
what this host looks for. A server may instead send an `elicitation/create` request in URL mode
(over 2026-07-28, inside an `InputRequiredResult`); the SDK hands it to the elicitation callback,
which records it (and, with --retry-after-connect, goes through the browser before accepting).

--browser-login OTHER opens the link signed in as someone else (a forwarded link). --api-key KEY
fills in the daemon's key page. --no-elicitation leaves the callback out, so the host declares no
elicitation capability at all, as most hosts still do. --mode is the SDK's connect policy: `auto`
(the default: a `server/discover` probe, then 2026-07-28 with a server that answers it) or
`legacy` (the `initialize` handshake, 2025-11-25).

Prints one JSON summary line: the protocol version, the capabilities the host sent (in
`initialize`, or in each request's `_meta` under 2026-07-28), the mount's access token and its
claims, `first` and `second` (each call's outcome: "result" with its text, "error" with the
JSON-RPC error, or "elicitation"), `elicitation` ({url, elicitation_id, message, via}), and
`browser` (the connect pages' final status, URL and text). Exits non-zero on anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version

import httpx2
from mcp import Client, InputRequiredRoundsExceededError, MCPError
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from mcp_types import URL_ELICITATION_REQUIRED, ElicitResult

from connect_browser import Browser
from harness import check, report, texts
from oauth_client import REDIRECT_URI, MemoryStorage, authorization_response, jwt_part

CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"


class Host:
    """What the host saw and did: the elicitation it was given, the browser's last page."""

    def __init__(self, login: str, browser_login: str, api_key: str | None, connect: bool) -> None:
        self.login = login
        self.browser_login = browser_login
        self.api_key = api_key
        self.connect = connect
        self.authorization_url: str | None = None
        self.code: AuthorizationCodeResult | None = None
        self.elicitation: dict | None = None
        self.browser: dict | None = None
        self.sent: list[dict] = []

    # The OAuthClientProvider's redirect and callback handlers: the mount's sign-in, as LOGIN.
    async def redirect(self, authorization_url: str) -> None:
        self.authorization_url = authorization_url
        async with Browser(self.login) as browser:
            page = await browser.open(authorization_url, stop_at=REDIRECT_URI)
        check(page.redirected_to is not None, f"the sign-in ended at {page.url} ({page.status}): {page.text[:300]}")
        self.code = authorization_response(page.redirected_to)

    async def callback(self) -> AuthorizationCodeResult:
        check(self.code is not None, "the redirect handler did not obtain an authorization code")
        return self.code

    async def on_elicitation(self, context, params) -> ElicitResult:
        """An `elicitation/create` request from the server (the SDK's elicitation callback)."""
        mode = getattr(params, "mode", None)
        print(f"host: elicitation/create in {mode} mode", file=sys.stderr)
        if mode != "url":
            return ElicitResult(action="decline")
        self.elicitation = {
            "via": "elicitation/create",
            "mode": mode,
            "url": params.url,
            "elicitation_id": getattr(params, "elicitation_id", None),
            "message": params.message,
        }
        if not self.connect:
            return ElicitResult(action="cancel")
        await self.open_link(params.url)
        return ElicitResult(action="accept")

    async def open_link(self, url: str) -> None:
        async with Browser(self.browser_login, api_key=self.api_key) as browser:
            self.browser = (await browser.open(url)).summary()
        shown = f"{self.browser['status']}: {self.browser['text'][:200]}"
        print(f"host: the connect pages ended with {shown}", file=sys.stderr)

    async def record(self, request: httpx2.Request) -> None:
        """Keeps the JSON-RPC requests sent to the mount, for the capabilities they declare."""
        try:
            body = json.loads(request.content or b"null")
        except (ValueError, httpx2.RequestNotRead):
            return
        if isinstance(body, dict) and "method" in body:
            self.sent.append(body)

    def declared_capabilities(self) -> dict:
        """What the host told the server it can do: in `initialize` (the handshake), else in the
        `_meta` of its requests (2026-07-28 has no handshake)."""
        for body in self.sent:
            if body["method"] == "initialize":
                return {"in": "initialize", "capabilities": body["params"].get("capabilities")}
        for body in self.sent:
            meta = (body.get("params") or {}).get("_meta") or {}
            if body["method"] == "tools/call" and CAPABILITIES_META_KEY in meta:
                return {"in": "tools/call _meta", "capabilities": meta[CAPABILITIES_META_KEY]}
        return {"in": None, "capabilities": None}


async def attempt(client: Client, tool: str, host: Host) -> dict:
    """Calls `tool`: its result, the error the SDK raised, or the elicitation it was given."""
    host.elicitation = None
    try:
        called = await client.call_tool(tool, {})
    except MCPError as error:
        outcome = {
            "outcome": "error",
            "raised": type(error).__name__,
            "error": {"code": error.code, "message": error.message, "data": error.data},
        }
        if error.code == URL_ELICITATION_REQUIRED:
            elicitations = (error.data or {}).get("elicitations") or []
            check(len(elicitations) == 1, f"expected one elicitation in {error.data}")
            first = elicitations[0]
            host.elicitation = {
                "via": "error -32042",
                "mode": first.get("mode"),
                "url": first.get("url"),
                "elicitation_id": first.get("elicitationId"),
                "message": first.get("message"),
            }
            outcome["outcome"] = "elicitation"
        return outcome
    except InputRequiredRoundsExceededError as error:
        # The host declined the elicitation/create it was sent and the server kept asking.
        check(host.elicitation is not None, f"input required, but no elicitation: {error}")
        return {"outcome": "elicitation", "raised": type(error).__name__, "error": {"message": str(error)}}
    if host.elicitation is not None and not called.is_error:
        # The SDK went through an elicitation/create round trip and then got the result.
        return {"outcome": "result", "is_error": False, "after": "elicitation/create", "text": "\n".join(texts(called))}
    if host.elicitation is not None:
        return {"outcome": "elicitation", "is_error": True, "text": "\n".join(texts(called))}
    return {"outcome": "result", "is_error": bool(called.is_error), "text": "\n".join(texts(called))}


async def run(url: str, tool: str, login: str, options: argparse.Namespace) -> dict:
    host = Host(login, options.browser_login or login, options.api_key, options.retry_after_connect)
    storage = MemoryStorage()
    oauth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="mcpbootd connected accounts test",
            redirect_uris=[REDIRECT_URI],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=host.redirect,
        callback_handler=host.callback,
    )
    summary: dict = {"sdk": f"python mcp {version('mcp')}", "mode": options.mode, "login": login}
    async with httpx2.AsyncClient(auth=oauth, timeout=30, event_hooks={"request": [host.record]}) as http:
        async with Client(
            streamable_http_client(url, http_client=http),
            mode=options.mode,
            elicitation_callback=None if options.no_elicitation else host.on_elicitation,
            read_timeout_seconds=30,
        ) as client:
            summary["protocol_version"] = client.protocol_version
            first = await attempt(client, tool, host)
            summary["first"] = first
            summary["elicitation"] = host.elicitation
            if first["outcome"] == "elicitation" and options.retry_after_connect:
                check(host.elicitation["url"], f"the elicitation has no URL: {host.elicitation}")
                await host.open_link(host.elicitation["url"])
                summary["second"] = await attempt(client, tool, host)
            summary["browser"] = host.browser
    check(storage.tokens is not None, "the SDK stored no token")
    token = storage.tokens.access_token
    claims = jwt_part(token, 1) if token.count(".") == 2 else {}
    summary["declared"] = host.declared_capabilities()
    summary["access_token"] = token
    summary["claims"] = {name: claims.get(name) for name in ("iss", "sub", "aud", "scope")}
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description="Calls TOOL as LOGIN and connects the account when asked to.")
    parser.add_argument("url")
    parser.add_argument("tool")
    parser.add_argument("login")
    parser.add_argument("--retry-after-connect", action="store_true", help="open the connect link, then call again")
    parser.add_argument("--browser-login", help="sign in at the connect link as this user instead of LOGIN")
    parser.add_argument("--api-key", help="the key to type into the daemon's API key page")
    parser.add_argument("--mode", default="auto", choices=["auto", "legacy"], help="the SDK's connect policy")
    parser.add_argument("--no-elicitation", action="store_true", help="declare no elicitation capability")
    args = parser.parse_args()
    return report(run(args.url, args.tool, args.login, args))


if __name__ == "__main__":
    sys.exit(main())
