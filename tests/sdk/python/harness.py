"""What the SDK client scripts share: how they state an unexpected answer and how they report.

Each script (client.py, code_mode.py, oauth_client.py) prints one JSON summary line on success, or
the root causes of its failure on stderr with exit status 1; tests/it/*.rs read exactly that.
"""

import asyncio
import json
import sys
import traceback

from mcp.types import TextContent


class Unexpected(Exception):
    """The server answered, but not what the test expects."""


def check(condition: bool, message: str) -> None:
    if not condition:
        raise Unexpected(message)


def texts(result) -> list[str]:
    return [item.text for item in result.content if isinstance(item, TextContent)]


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def report(run) -> int:
    """Runs the coroutine `run`: prints its summary as one JSON line (0), or why it failed (1)."""
    try:
        summary = asyncio.run(run)
    except Exception as error:  # noqa: BLE001 - report the root causes, not anyio's task-group wrappers
        for cause in leaves(error):
            if isinstance(cause, Unexpected):
                print(f"unexpected: {cause}", file=sys.stderr)
            else:
                traceback.print_exception(cause, file=sys.stderr)
        return 1
    print(json.dumps(summary))
    return 0
