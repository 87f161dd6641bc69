"""The shapes of the service's requests and answers, as the OpenAPI document's JSON Schemas.

One owner for what a client may rely on: the routes' docstrings refer to these by ``$ref``
(``#/components/schemas/NAME``), :mod:`agentloop.service.app` serves them in ``/openapi.json``
(OpenAPI 3.1, whose schemas are JSON Schema 2020-12), and the tests validate real answers
against them, so a field the code adds or drops without saying so here fails a test.
:func:`openapi_document` turns the handlers' docstring shorthand into that document.
"""

from __future__ import annotations

from typing import Any

_STR_OR_NULL = {"type": ["string", "null"]}
_NUM_OR_NULL = {"type": ["number", "null"]}

# the statuses a run can have: the service's own, then how the runner ends a run
STATUSES = ["queued", "running", "ok", "error", "cancelled", "budget", "interrupted"]

SCHEMAS: dict[str, Any] = {
    "RunRequest": {
        "type": "object",
        "additionalProperties": False,
        "required": ["task"],
        "properties": {
            "task": {
                "description": "a path inside the tasks folder (relative to it), a task's "
                "name, or an inline task object (the fields of a task file)",
                "oneOf": [{"type": "string"}, {"type": "object"}],
            },
            "tier": {"type": ["string", "null"], "maxLength": 200},
            "limits": {
                "type": "object",
                "description": "a task file's limits: on top of the task's own",
            },
            "routing": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "agent name ('main': the top agent) -> tier, on top of the "
                "task's routing:",
            },
        },
    },
    "RunAccepted": {
        "type": "object",
        "additionalProperties": False,
        "required": ["id", "status"],
        "properties": {"id": {"type": "string"}, "status": {"enum": STATUSES}},
    },
    "RunSummary": {
        "type": "object",
        "additionalProperties": False,
        "required": [
            "id",
            "task",
            "tier",
            "status",
            "reason",
            "submitted_at",
            "started_at",
            "ended_at",
            "run_id",
            "steps",
            "elapsed_s",
            "wall_s",
            "success",
            "success_detail",
            "trace",
            "resumed_from",
            "resumed_as",
        ],
        "properties": {
            "id": {"type": "string", "description": "the run's id in every route and event"},
            "task": {"type": "string"},
            "tier": _STR_OR_NULL,
            "status": {"enum": STATUSES},
            "reason": {"type": "string"},
            "submitted_at": {"type": "string", "format": "date-time"},
            "started_at": _STR_OR_NULL,
            "ended_at": _STR_OR_NULL,
            "run_id": {
                "type": ["string", "null"],
                "description": "the run's id in its trace and events: the same as id, once started",
            },
            "steps": {"type": "integer", "minimum": 0},
            "elapsed_s": {
                "type": ["number", "null"],
                "description": "the agent's time: the run span, what the what-if re-times",
            },
            "wall_s": {
                "type": ["number", "null"],
                "description": "start to end, with the run's set-up and success check",
            },
            "success": {"type": ["boolean", "null"]},
            "success_detail": {"type": "string"},
            "trace": _STR_OR_NULL,
            "resumed_from": {
                "type": ["string", "null"],
                "description": "the interrupted run this one runs again (serve --resume)",
            },
            "resumed_as": {
                "type": ["string", "null"],
                "description": "the run that runs this interrupted one again",
            },
        },
    },
    "RunList": {
        "type": "object",
        "additionalProperties": False,
        "required": ["runs", "next_cursor"],
        "properties": {
            "runs": {"type": "array", "items": {"$ref": "#/components/schemas/RunSummary"}},
            "next_cursor": {
                "type": ["string", "null"],
                "description": "pass as ?cursor= for the next (older) page; null: no more",
            },
        },
    },
    "RunEvent": {
        "type": "object",
        "description": "the data of one server-sent event (its event: line is the kind)",
        "additionalProperties": False,
        "required": ["id", "kind", "run_id", "t_s", "step", "span_id", "data"],
        "properties": {
            "id": {"type": "string"},
            "kind": {"type": "string"},
            "run_id": _STR_OR_NULL,
            "t_s": {"type": "number"},
            "step": {"type": ["integer", "null"]},
            "span_id": _STR_OR_NULL,
            "data": {"type": "object"},
        },
    },
    "Error": {
        "type": "object",
        "additionalProperties": False,
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "additionalProperties": False,
                "required": ["message"],
                "properties": {
                    "message": {"type": "string"},
                    "field": {
                        "type": "string",
                        "description": "the body field, parameter or header at fault",
                    },
                },
            }
        },
    },
    "Health": {
        "type": "object",
        "required": ["status"],
        "properties": {"status": {"type": "string"}},
    },
    "Document": {"type": "object", "description": "the JSON the CLI prints with --json"},
}


def ref(name: str) -> dict[str, Any]:
    """``{"$ref": ...}`` to one of :data:`SCHEMAS`."""
    assert name in SCHEMAS, name
    return {"$ref": f"#/components/schemas/{name}"}


OPENAPI_INFO = {
    "openapi": "3.1.0",
    "info": {
        "title": "agentloop service",
        "version": "1",
        "description": "Run, stream and explain agent runs over HTTP.",
    },
}


def openapi_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The handlers' docstring shorthand made OpenAPI: ``body: NAME`` a JSON request body,
    a response's ``schema: NAME`` / ``content_type`` its content, the ``{id}`` path parameter;
    the schemas as components."""
    for path, ops in doc.get("paths", {}).items():
        for op in ops.values():
            if "{id}" in path:
                op["parameters"] = [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                    *op.get("parameters", []),
                ]
            if "body" in op:
                op["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": ref(op.pop("body"))}},
                }
            for resp in op.get("responses", {}).values():
                kind = resp.pop("content_type", "application/json")
                name = resp.pop("schema", None)
                resp["content"] = {kind: {"schema": ref(name) if name else {"type": "string"}}}
    doc["components"] = {"schemas": SCHEMAS}
    return doc
