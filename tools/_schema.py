"""Tool schemas from typed signatures: JSON schema derivation, argument checking, the Tool wrapper.

A tool is a plain ``async def name(ctx, arg: T, ...) -> ToolResult`` whose docstring's first
paragraph is its description and whose ``Args:`` section describes each parameter.
:class:`FunctionTool` wraps one so it meets :class:`agentloop.protocols.Tool`: it validates and
coerces the model's JSON arguments against the signature and turns every failure into
``ToolResult(ok=False)`` (bad arguments name the argument; exceptions give their message).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Union

import orjson
from agentloop_tools._sandbox import cap_text, output_cap

from agentloop.errors import ToolError
from agentloop.protocols import ToolContext
from agentloop.types import ToolResult, ToolSpec

ToolFunction = Callable[..., Awaitable[ToolResult]]

_JSON_TYPES: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARG_LINE = re.compile(r"^(\s*)(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


class ArgumentError(ValueError):
    """An argument does not fit the signature; the message names the argument."""


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """(description = first paragraph, {parameter: description}) from a Google-style docstring."""
    text = inspect.cleandoc(doc or "")
    paragraphs = text.split("\n\n")
    description = " ".join(paragraphs[0].split()) if paragraphs and paragraphs[0] else ""
    params: dict[str, str] = {}
    lines = text.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() in ("Args:", "Arguments:"))
    except StopIteration:
        return description, params
    current: str | None = None
    base_indent: int | None = None
    for ln in lines[start + 1 :]:
        if not ln.strip():
            current = None
            continue
        indent = len(ln) - len(ln.lstrip())
        if indent == 0:
            break  # the next section (Returns:, ...) starts
        m = _ARG_LINE.match(ln)
        if m and (base_indent is None or indent <= base_indent):
            base_indent = indent
            current = m.group(2).lstrip("*")
            params[current] = m.group(3).strip()
        elif current is not None:
            params[current] = (params[current] + " " + ln.strip()).strip()
    return description, params


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """(T, True) for ``T | None`` / ``Optional[T]``; (tp, False) otherwise."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != len(typing.get_args(tp)):
            if len(args) != 1:
                raise TypeError(f"unsupported union {tp!r}")
            return args[0], True
    return tp, False


def type_schema(tp: Any) -> dict[str, Any]:
    """JSON schema of one annotation: str, int, float, bool, list[T], dict, Literal[...]."""
    tp, _ = _strip_optional(tp)
    origin = typing.get_origin(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin is Literal:
        values = list(typing.get_args(tp))
        kinds = {_JSON_TYPES[type(v)] for v in values}
        schema: dict[str, Any] = {"enum": values}
        if len(kinds) == 1:
            schema["type"] = kinds.pop()
        return schema
    if origin is list or tp is list:
        args = typing.get_args(tp)
        return {"type": "array", "items": type_schema(args[0]) if args else {}}
    if origin is dict or tp is dict:
        return {"type": "object"}
    raise TypeError(f"unsupported parameter type {tp!r}")


def _coerce(name: str, tp: Any, value: Any) -> Any:
    """``value`` checked against ``tp``; a few lossless coercions models need ("3" -> 3)."""
    tp, optional = _strip_optional(tp)
    if value is None:
        if optional:
            return None
        raise ArgumentError(f"argument '{name}' must not be null")
    origin = typing.get_origin(tp)
    want = type_schema(tp).get("type", "value")
    if origin is Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ArgumentError(
                f"argument '{name}' must be one of "
                f"{', '.join(repr(a) for a in allowed)}; got {value!r}"
            )
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            return int(value)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif origin is list or tp is list:
        if isinstance(value, list):
            (item,) = typing.get_args(tp) or (Any,)
            if item is Any:
                return value
            return [_coerce(f"{name}[{i}]", item, v) for i, v in enumerate(value)]
    elif (origin is dict or tp is dict) and isinstance(value, dict):
        return value
    raise ArgumentError(
        f"argument '{name}' must be {_article(want)} {want}; "
        f"got {_json_kind(value)} {_short(value)}"
    )


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _json_kind(value: Any) -> str:
    for tp, kind in (
        (bool, "boolean"),
        (int, "integer"),
        (float, "number"),
        (str, "string"),
        (list, "array"),
        (dict, "object"),
    ):
        if isinstance(value, tp):
            return kind
    return type(value).__name__


def _short(value: Any) -> str:
    text = orjson.dumps(value, default=str).decode()
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class _Param:
    name: str
    annotation: Any
    required: bool
    default: Any


@dataclass(frozen=True)
class FunctionTool:
    """A typed async function exposed as a :class:`agentloop.protocols.Tool`."""

    fn: ToolFunction
    spec: ToolSpec
    params: tuple[_Param, ...]

    @classmethod
    def wrap(cls, fn: ToolFunction, name: str | None = None) -> FunctionTool:
        """Derive the spec from ``fn``'s signature and docstring (its first parameter is ctx)."""
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
        description, docs = parse_docstring(fn.__doc__)
        params = []
        properties: dict[str, Any] = {}
        required = []
        for p in list(sig.parameters.values())[1:]:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{fn.__name__}: *args/**kwargs cannot be described to a model")
            if p.name not in hints:
                raise TypeError(f"{fn.__name__}: parameter '{p.name}' has no annotation")
            schema = type_schema(hints[p.name])
            if p.name in docs:
                schema["description"] = docs[p.name]
            has_default = p.default is not inspect.Parameter.empty
            if has_default and p.default is not None:
                schema["default"] = p.default
            properties[p.name] = schema
            if not has_default:
                required.append(p.name)
            params.append(
                _Param(p.name, hints[p.name], not has_default, p.default if has_default else None)
            )
        parameters = {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        }
        spec = ToolSpec(name=name or fn.__name__, description=description, parameters=parameters)
        return cls(fn=fn, spec=spec, params=tuple(params))

    def bind(self, arguments: Any) -> dict[str, Any]:
        """Keyword arguments for ``fn`` from the model's JSON arguments; raises ArgumentError."""
        if isinstance(arguments, str | bytes):
            try:
                arguments = orjson.loads(arguments or "{}")
            except orjson.JSONDecodeError as exc:
                raise ArgumentError(f"arguments are not valid JSON ({exc})") from None
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ArgumentError(f"arguments must be a JSON object, got {_json_kind(arguments)}")
        known = {p.name for p in self.params}
        unknown = sorted(set(arguments) - known)
        if unknown:
            raise ArgumentError(
                f"unknown argument{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(u) for u in unknown)}; "
                f"{self.spec.name} takes: {', '.join(p.name for p in self.params) or 'nothing'}"
            )
        kwargs = {}
        for p in self.params:
            if p.name not in arguments:
                if p.required:
                    raise ArgumentError(f"missing required argument '{p.name}'")
                continue
            kwargs[p.name] = _coerce(p.name, p.annotation, arguments[p.name])
        return kwargs

    async def __call__(self, ctx: ToolContext, arguments: dict[str, Any]) -> ToolResult:
        """Run the tool; every failure (bad arguments, refusal, exception) is an ok=False result."""
        try:
            kwargs = self.bind(arguments)
        except ArgumentError as exc:
            return ToolResult(ok=False, output=f"Error: {self.spec.name}: {exc}")
        try:
            result = await self.fn(ctx, **kwargs)
        except ToolError as exc:
            return ToolResult(ok=False, output=f"Error: {exc.message}")
        except Exception as exc:  # any tool bug is the model's to see, never the runner's crash
            return ToolResult(
                ok=False, output=f"Error: {self.spec.name} failed: {type(exc).__name__}: {exc}"
            )
        cap = output_cap(ctx)
        if len(result.output) > cap:  # the tools cap themselves; this is the backstop
            result = ToolResult(ok=result.ok, output=cap_text(result.output, cap), data=result.data)
        return result
