"""Generates a Python client from a running mcpbootd's OpenAPI document and drives it.

Usage: drive.py BASE_URL SERVER_ID TOOL ARGUMENTS_JSON WORK_DIR

Fetches BASE_URL/admin/openapi.json, runs openapi-python-client on it (the real generator, as an
API user would), imports the generated package and, through it only: lists the servers, shows
SERVER_ID, calls TOOL with ARGUMENTS_JSON, and asks for a server that does not exist. Prints one
JSON summary line on stdout: everything the generator printed besides its "Generating" line
(`warnings`: a schema or operation it skipped), every object schema of the document without a
complete model (`model_gaps`), and what the server's model lost of the daemon's answer
(`round_trip_losses`), besides the calls' results. Exits non-zero with the reason on stderr when
generation fails or a call does not return the documented model. Run by tests/it/openapi.rs.
"""

import importlib
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import attrs
from openapi_python_client.strings import ClassName, PythonIdentifier


def model_gaps(document: dict, models) -> list[str]:
    """Object schemas of the document that have no generated model, or whose model lacks one of
    their properties. Enums, unions and aliases have no class of their own and are left out; the
    generator warns about those it cannot read."""
    schemas = document["components"]["schemas"]
    gaps = []
    for name, schema in schemas.items():
        if schema.get("type") != "object" and "allOf" not in schema:
            continue
        properties = {}
        for part in schema.get("allOf", [schema]):
            if "$ref" in part:
                part = schemas[part["$ref"].rsplit("/", 1)[1]]
            properties.update(part.get("properties", {}))
        model = getattr(models, ClassName(name, ""), None)
        if model is None:
            gaps.append(f"{name}: no model")
            continue
        fields = {field.name for field in attrs.fields(model)}
        gaps += [f"{name}.{key}: no field" for key in properties if PythonIdentifier(key, "field_") not in fields]
    return gaps


def losses(sent, kept, at: str = "") -> list[str]:
    """Where `kept` (a model's `to_dict()`) differs from `sent` (the JSON it was read from)."""
    if isinstance(sent, dict) and isinstance(kept, dict):
        found = []
        for key in sent.keys() | kept.keys():
            if key not in kept:
                found.append(f"{at}/{key}: dropped")
            elif key not in sent:
                found.append(f"{at}/{key}: added")
            else:
                found += losses(sent[key], kept[key], f"{at}/{key}")
        return found
    if isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        return [loss for i, (a, b) in enumerate(zip(sent, kept)) for loss in losses(a, b, f"{at}[{i}]")]
    return [] if sent == kept else [f"{at}: {sent!r} became {kept!r}"]


def main() -> int:
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    base_url, server_id, tool, arguments, work = sys.argv[1:]
    work = Path(work)
    document = work / "openapi.json"
    token = os.environ.get("MCPBOOTD_ADMIN_TOKEN", "")
    request = urllib.request.Request(f"{base_url}/admin/openapi.json", headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request) as response:
        document.write_bytes(response.read())
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    generated = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(document), "--meta", "none",
         "--output-path", str(work / "mcpbootd_client")],
        capture_output=True, text=True, env=env,
    )
    if generated.returncode != 0 or not (work / "mcpbootd_client" / "client.py").exists():
        print(f"openapi-python-client failed:\n{generated.stdout}\n{generated.stderr}", file=sys.stderr)
        return 1
    # Any output but the progress line is a warning: the generator words them in many ways.
    output = generated.stdout.splitlines() + generated.stderr.splitlines()
    warnings = [line for line in output if line.strip() and not line.startswith("Generating ")]

    sys.path.insert(0, str(work))
    client_module = importlib.import_module("mcpbootd_client")
    api = importlib.import_module("mcpbootd_client.api.default")
    models = importlib.import_module("mcpbootd_client.models")
    for name in ("list_servers", "get_server", "call_tool"):
        importlib.import_module(f"mcpbootd_client.api.default.{name}")

    client = client_module.AuthenticatedClient(base_url=base_url, token=token)
    listed = api.list_servers.sync(client=client)
    if not isinstance(listed, models.ServerList):
        raise SystemExit(f"list_servers returned {listed!r}")
    answer = api.get_server.sync_detailed(server_id, client=client)
    shown = answer.parsed
    if not isinstance(shown, models.ServerView):
        raise SystemExit(f"get_server returned {shown!r}")
    body = models.CallRequest(arguments=models.CallRequestArguments.from_dict(json.loads(arguments)))
    called = api.call_tool.sync(server_id, tool, client=client, body=body)
    if not isinstance(called, models.CallResult):
        raise SystemExit(f"call_tool returned {called!r}")
    missing = api.get_server.sync("no-such-server", client=client)
    if not isinstance(missing, models.ErrorBody):
        raise SystemExit(f"get_server of a missing server returned {missing!r}")

    print(json.dumps({
        "warnings": warnings,
        "model_gaps": model_gaps(json.loads(document.read_text()), models),
        "round_trip_losses": losses(json.loads(answer.content), shown.to_dict()),
        "servers": [server.id for server in listed.servers],
        "server": {"id": shown.id, "name": shown.name, "status": str(shown.status),
                   "tools": [tool.name for tool in shown.tools],
                   "whitelist": [entry.domain for entry in shown.whitelist]},
        "call": {"outcome": str(called.outcome), "result": called.result.to_dict()},
        "missing": {"code": str(missing.error.code), "message": missing.error.message},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
