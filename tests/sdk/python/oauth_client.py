"""Signs in through OAuth with the official MCP Python SDK, the way an MCP host does, then uses the
mount with the token it obtained.

Usage: oauth_client.py MCP_URL TOOL [SCOPE]

Run by tests/it/oauth_provider.rs against a mount behind [auth.oauth] whose provider is
tests/sdk/oidc/provider.mjs. The SDK's OAuthClientProvider does the whole dance: the 401's
`WWW-Authenticate` names the mount's RFC 9728 metadata, which names the provider; it discovers
the provider, registers a public client dynamically, and runs authorization code + PKCE with the
mount's URL as the RFC 8707 `resource`.

Where a host opens a browser, the redirect handler here plays the user: it follows the
authorization URL with a cookie jar through the provider's development sign-in form (login
"alice", any password) and consent form, and reads `code`, `state` and `iss` from the final
redirect to the redirect URI, which nobody listens on. The callback handler hands them back.

Then it lists the tools, calls TOOL (no arguments), and prints one JSON summary line on stdout:
the tool names, the call's text, the access token with its decoded header and claims (not
verified: the daemon is what verifies them), what the authorization request asked for, and how
many 401s the daemon answered. Exits non-zero, with the reason on stderr, on anything unexpected.

SCOPE (default "mcp:read mcp:write") is the scope the host is configured with. mcp 2.3.0 replaces
it by the scope the server side names (the 401's `scope`, else the resource's `scopes_supported`,
else the provider's), so `authorization_request.scope` in the summary is what was really asked for.
"""

import base64
import json
import re
import sys
from html import unescape
from importlib.metadata import version
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from harness import Unexpected, check, report, texts

# Nobody listens here: the redirect handler stops at the redirect to it and reads its query.
REDIRECT_URI = "http://127.0.0.1/oauth/callback"
LOGIN = "alice"


class MemoryStorage(TokenStorage):
    """A host would keep these on disk; one run needs them in memory only."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class User:
    """The person at the browser: signs in and consents at the provider's development forms."""

    def __init__(self) -> None:
        self.authorization_url: str | None = None
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        self.authorization_url = authorization_url
        # A browser of its own: the provider's interaction cookies stay out of the MCP client.
        async with httpx2.AsyncClient(follow_redirects=False, timeout=10) as browser:
            response = await browser.get(authorization_url)
            for _ in range(12):
                if response.is_redirect:
                    location = urljoin(str(response.url), response.headers["location"])
                    if location.startswith(REDIRECT_URI):
                        self.result = authorization_response(location)
                        return
                    response = await browser.get(location)
                elif response.status_code == 200 and "<form" in response.text:
                    action, prompt = form_of(response.text)
                    fields = {"prompt": prompt}
                    if prompt == "login":
                        fields |= {"login": LOGIN, "password": "any password"}
                    print(f"provider: submitting the {prompt} form", file=sys.stderr)
                    response = await browser.post(urljoin(str(response.url), action), data=fields)
                else:
                    raise Unexpected(
                        f"the provider answered {response.status_code} at {response.url}: {response.text[:500]}"
                    )
        raise Unexpected("no redirect to the redirect URI after 12 steps")

    async def callback(self) -> AuthorizationCodeResult:
        check(self.result is not None, "the redirect handler did not obtain an authorization code")
        return self.result


def form_of(html: str) -> tuple[str, str]:
    """The action and the hidden `prompt` (login or consent) of the provider's interaction form."""
    action = re.search(r'<form[^>]*\baction="([^"]+)"', html)
    prompt = re.search(r'name="prompt" value="([^"]+)"', html)
    check(action is not None and prompt is not None, f"no interaction form in the provider's page: {html[:500]}")
    return unescape(action.group(1)), prompt.group(1)


def authorization_response(location: str) -> AuthorizationCodeResult:
    query = {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}
    if "error" in query:
        raise Unexpected(f"the provider refused the authorization: {query}")
    check("code" in query, f"no code in the redirect: {location}")
    return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))


def jwt_part(token: str, index: int) -> dict:
    part = token.split(".")[index]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


async def run(url: str, tool: str, scope: str) -> dict:
    storage = MemoryStorage()
    user = User()
    oauth = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="mcpbootd OAuth end-to-end test",
            redirect_uris=[REDIRECT_URI],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            scope=scope,
        ),
        storage=storage,
        redirect_handler=user.redirect,
        callback_handler=user.callback,
    )
    seen: list[tuple[str, int]] = []

    async def record(response: httpx2.Response) -> None:
        seen.append((str(response.request.url), response.status_code))

    async with httpx2.AsyncClient(auth=oauth, timeout=20, event_hooks={"response": [record]}) as http:
        async with Client(streamable_http_client(url, http_client=http), read_timeout_seconds=20) as client:
            listed = await client.list_tools()
            tools = sorted(tool.name for tool in listed.tools)
            check(tool in tools, f"expected a tool {tool}, got {tools}")
            called = await client.call_tool(tool, {})
            check(not called.is_error, f"{tool} failed: {texts(called)}")
            protocol_version = client.protocol_version

    check(storage.tokens is not None, "the SDK stored no token")
    check(user.authorization_url is not None, "the SDK never asked the user to sign in")
    token = storage.tokens.access_token
    check(token.count(".") == 2, f"the access token is not a JWT: {token[:40]}…")
    claims = jwt_part(token, 1)
    asked = {name: values[0] for name, values in parse_qs(urlsplit(user.authorization_url).query).items()}
    return {
        "sdk": f"python mcp {version('mcp')}",
        "protocol_version": protocol_version,
        "tools": tools,
        "result": "\n".join(texts(called)),
        "requested_scope": scope,
        "authorization_request": {name: asked.get(name) for name in ("scope", "resource", "code_challenge_method")},
        "client_id": storage.client_info.client_id if storage.client_info else None,
        "access_token": token,
        "token_header": jwt_part(token, 0),
        "claims": {name: claims.get(name) for name in ("iss", "sub", "aud", "client_id", "scope")},
        "unauthorized_responses": sum(1 for request_url, status in seen if status == 401 and request_url == url),
    }


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print("usage: oauth_client.py MCP_URL TOOL [SCOPE]", file=sys.stderr)
        return 2
    url, tool = sys.argv[1], sys.argv[2]
    scope = sys.argv[3] if len(sys.argv) == 4 else "mcp:read mcp:write"
    return report(run(url, tool, scope))


if __name__ == "__main__":
    sys.exit(main())
