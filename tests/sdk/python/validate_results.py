"""Checks tool results against their tools' output schemas as the MCP Python SDK's client does.

Used by the OpenAPI quality run (tests/support/openapi_quality.rs): reads a JSON list of
{"schema": ..., "result": ...} from stdin and prints a JSON list with, for each, null when the
result is valid, or the error the SDK's ClientSession would raise.
"""

import json
import sys

from jsonschema import exceptions, validators


def check(schema, result):
    # ClientSession.validate_tool_result: the validator for the schema's draft, best_match error.
    validator = validators.validator_for(schema)(schema)
    error = exceptions.best_match(validator.iter_errors(result))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or '(top)'}: {error.message[:300]}"


def main():
    checks = json.load(sys.stdin)
    json.dump([check(c["schema"], c["result"]) for c in checks], sys.stdout)


if __name__ == "__main__":
    main()
