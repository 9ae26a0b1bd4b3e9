"""The person at the browser: opens a URL and goes through whatever sign-in and consent pages the
identity providers show, the way someone who clicked a link would, until a page asks for nothing
more.

Usage: connect_browser.py URL LOGIN [--api-key KEY] [--tamper-state] [--replay]

Run by tests/it/connected_accounts.rs on a connect link (`<public_url>/connect/<token>`, the URL
of the daemon's URL elicitation), and imported by connect_client.py, whose MCP host signs in with
the same browser. One cookie jar for every host, like a browser: the daemon and both providers
(tests/sdk/oidc/provider.mjs) all listen on 127.0.0.1, so cookies of one are sent to the others
(cookies are per host, not per port), which is why the providers' cookie names differ.

What it does on each answer:
* a redirect: follows it (GET), on any host;
* a provider's development sign-in or consent form (oidc-provider's devInteractions, recognised by
  its hidden `prompt` input): fills it in as LOGIN (any password) and submits it;
* a form with an `api_key` input (the daemon's key page) and --api-key given: submits KEY with
  the form's hidden inputs;
* anything else is the final page.

Prints one JSON line: {"status", "url", "text" (the final page's visible text), "steps": [{"method",
"url", "status"}…]}. --tamper-state changes the `state` of the redirect to the daemon's
`/connect/callback` before following it (a forged or mixed-up callback). --replay sends the final
request once more with the same cookies, as someone replaying the authorization response would,
and adds {"replay": {"status", "url", "text"}}. Exits 1 only when the browser itself cannot go on
(a provider refused the sign-in, more than 24 steps); a daemon's error page is a final page.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

import httpx2

from harness import Unexpected, report

MAX_STEPS = 24


@dataclass
class Form:
    action: str
    method: str
    inputs: dict[str, str] = field(default_factory=dict)


class _Reader(HTMLParser):
    """The forms (action, method, named inputs with their values) and the visible text of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.text: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag in ("script", "style", "title", "head"):
            self._hidden += 1
        elif tag == "form":
            self.forms.append(Form(attributes.get("action", ""), attributes.get("method", "get").lower()))
        elif tag in ("input", "button", "textarea") and self.forms and attributes.get("name"):
            self.forms[-1].inputs.setdefault(attributes["name"], attributes.get("value", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style", "title", "head") and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden and data.strip():
            self.text.append(" ".join(data.split()))


def read_page(html: str) -> tuple[list[Form], str]:
    reader = _Reader()
    reader.feed(html)
    return reader.forms, " ".join(reader.text)


@dataclass
class Page:
    """Where the browser stopped: the last answer, or the redirect it was told to stop at."""

    status: int
    url: str
    text: str
    steps: list[dict]
    # Set when the browser stopped at a redirect to `stop_at` instead of following it.
    redirected_to: str | None = None
    # The request that produced this page, for a replay.
    request: tuple[str, str, dict | None] | None = None

    def summary(self) -> dict:
        return {"status": self.status, "url": self.url, "text": self.text, "steps": self.steps}


class Browser:
    """One person's browser (one cookie jar) for a whole run."""

    def __init__(self, login: str, api_key: str | None = None, tamper_state: bool = False) -> None:
        self.login = login
        self.api_key = api_key
        self.tamper_state = tamper_state
        self.http = httpx2.AsyncClient(follow_redirects=False, timeout=15)

    async def __aenter__(self) -> Browser:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.http.aclose()

    async def send(self, method: str, url: str, data: dict | None = None) -> httpx2.Response:
        if method == "post":
            return await self.http.post(url, data=data)
        return await self.http.get(url)

    async def open(self, url: str, stop_at: str | None = None) -> Page:
        """Opens `url` and goes on until a final page, or until a redirect to a URL that starts
        with `stop_at` (an OAuth client's redirect URI nobody listens on)."""
        steps: list[dict] = []
        request: tuple[str, str, dict | None] = ("get", url, None)
        for _ in range(MAX_STEPS):
            method, target, data = request
            response = await self.send(method, target, data)
            steps.append({"method": method.upper(), "url": target, "status": response.status_code})
            if response.is_redirect:
                location = urljoin(str(response.url), response.headers["location"])
                if stop_at is not None and location.startswith(stop_at):
                    return Page(response.status_code, target, "", steps, redirected_to=location, request=request)
                if self.tamper_state and urlsplit(location).path.endswith("/connect/callback"):
                    location = with_query(location, state="forged-state-0123456789")
                    print(f"browser: callback state replaced: {location}", file=sys.stderr)
                request = ("get", location, None)
                continue
            forms, text = read_page(response.text) if "html" in response.headers.get("content-type", "") else ([], "")
            form = next((form for form in forms if "prompt" in form.inputs), None)
            if response.status_code == 200 and form is not None:
                fields = dict(form.inputs)
                if fields["prompt"] == "login":
                    fields |= {"login": self.login, "password": "any password"}
                print(f"browser: submitting the {fields['prompt']} form at {response.url.host}", file=sys.stderr)
                request = (form.method, urljoin(str(response.url), form.action), fields)
                continue
            form = next((form for form in forms if "api_key" in form.inputs), None)
            if response.status_code == 200 and form is not None and self.api_key is not None:
                fields = dict(form.inputs) | {"api_key": self.api_key}
                print(f"browser: submitting the API key form ({sorted(fields)})", file=sys.stderr)
                request = (form.method, urljoin(str(response.url), form.action), fields)
                continue
            if urlsplit(target).path.startswith(("/interaction/", "/auth")) and response.status_code >= 400:
                # A provider's own error page: the flow it was sent into is broken (a wrong client,
                # redirect URI or parameter); its text says which.
                raise Unexpected(f"the provider at {target} answered {response.status_code}: {text or response.text}")
            return Page(response.status_code, target, text or response.text.strip(), steps, request=request)
        raise Unexpected(f"no final page after {MAX_STEPS} steps: {steps}")

    async def replay(self, page: Page) -> dict:
        """Sends the request that produced `page` once more, with the same cookies."""
        if page.request is None:
            raise Unexpected("nothing to replay")
        method, target, data = page.request
        response = await self.send(method, target, data)
        _, text = read_page(response.text)
        return {"status": response.status_code, "url": target, "text": text or response.text.strip()}


def with_query(url: str, **changes: str) -> str:
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True)) | changes
    return urlunsplit(parts._replace(query=urlencode(query)))


async def run(url: str, login: str, api_key: str | None, tamper_state: bool, replay: bool) -> dict:
    async with Browser(login, api_key=api_key, tamper_state=tamper_state) as browser:
        page = await browser.open(url)
        summary = page.summary()
        if replay:
            summary["replay"] = await browser.replay(page)
        return summary


def main() -> int:
    parser = argparse.ArgumentParser(description="Opens URL as LOGIN through the providers' sign-in pages.")
    parser.add_argument("url")
    parser.add_argument("login")
    parser.add_argument("--api-key", help="fill the daemon's API key form with this key")
    parser.add_argument("--tamper-state", action="store_true", help="forge the state of the /connect/callback redirect")
    parser.add_argument("--replay", action="store_true", help="send the final request again")
    args = parser.parse_args()
    return report(run(args.url, args.login, args.api_key, args.tamper_state, args.replay))


if __name__ == "__main__":
    sys.exit(main())
