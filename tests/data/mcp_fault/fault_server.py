"""A stdio MCP server that misbehaves on request, for the failure tests (tests/test_mcp_tools.py); it lives in the
workspace the tests copy, so the run's jail shows it.

Raw newline-delimited JSON-RPC on purpose (the SDK's server would not send a malformed result):
tools ``echo`` (answers), ``fail`` (an error result), ``malformed`` (a result that is no
CallToolResult), ``hang`` (never answers), ``die`` (exits mid-call). ``--marker TEXT`` only
marks the process (the tests look for it after the run); ``--also NAME`` offers one more tool.
"""

import json
import sys
import time

names = ["echo", "fail", "malformed", "hang", "die"]
if "--also" in sys.argv:
    names.append(sys.argv[sys.argv.index("--also") + 1])
if "--exit-at-start" in sys.argv:
    print("cannot start: no database", file=sys.stderr, flush=True)
    sys.exit(3)


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    req = json.loads(line)
    method, rid = req.get("method"), req.get("id")
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": req["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "fault", "version": "1"},
                },
            }
        )
    elif method == "tools/list":
        tools = [
            {
                "name": n,
                "description": f"{n} on request",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
            for n in names
        ]
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": tools}})
    elif method == "tools/call":
        name = req["params"]["name"]
        args = req["params"].get("arguments") or {}
        if name == "fail":
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "content": [{"type": "text", "text": "no such table: users"}],
                        "isError": True,
                    },
                }
            )
        elif name == "malformed":
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": "not a list of blocks"}})
        elif name == "hang":
            time.sleep(3600)
        elif name == "die":
            print("fault server: dying on request", file=sys.stderr, flush=True)
            sys.exit(9)
        else:
            send(
                {
                    "jsonrpc": "2.0",
                    "id": rid,
                    "result": {
                        "content": [{"type": "text", "text": "echo: " + str(args.get("text"))}]
                    },
                }
            )
    elif rid is not None:
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
