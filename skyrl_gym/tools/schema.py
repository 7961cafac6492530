"""JSON schemas for tools, derived from a function's signature and docstring.

:func:`function_schema` turns a Python function into the OpenAI function-calling format::

    {"type": "function",
     "function": {"name": ..., "description": ...,
                  "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

Annotations map to JSON types: ``str`` -> string, ``int`` -> integer, ``float`` -> number, ``bool`` ->
boolean, ``None`` -> null, ``list[X]``/``set[X]``/``tuple[...]`` -> array, ``dict[str, X]`` -> object,
``Literal[...]`` and ``Enum`` subclasses -> ``enum``, ``Optional``/``Union`` -> a list of types (or ``anyOf``
when a member is more than a bare type). An unannotated parameter, ``Any`` and types with no JSON
counterpart put no constraint on the value. A parameter with a default is optional, and the default is
shown when it is JSON-serialisable. Descriptions come from a Google-style docstring: its first paragraph
describes the function, its ``Args:`` section the parameters (``Annotated[int, "..."]`` works too).

The same module checks JSON values against these schemas (:func:`validate_value`) and converts checked
values to what the annotation asks for (:func:`coerce_value`: ``Enum`` members, tuples, sets, floats).
"""

from __future__ import annotations

import collections.abc as abc
import enum
import functools
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ParameterInfo",
    "coerce_value",
    "describe_schema",
    "function_schema",
    "json_type_name",
    "parameters_of",
    "type_schema",
    "validate_value",
]

_EMPTY = inspect.Parameter.empty
_NONE_TYPE = type(None)
_UNION_ORIGINS: tuple[Any, ...] = (typing.Union, types.UnionType)
_ARRAY_ORIGINS = (list, abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection)
_SET_ORIGINS = (set, frozenset, abc.Set, abc.MutableSet)
_OBJECT_ORIGINS = (dict, abc.Mapping, abc.MutableMapping)


# -- annotations -> JSON schema ---------------------------------------------------------------------------
def type_schema(annotation: Any) -> dict[str, Any]:
    """The JSON schema of one annotation; ``{}`` (any value) when it has no JSON counterpart."""
    if annotation is _EMPTY or annotation is Any or annotation is object:
        return {}
    if annotation is None or annotation is _NONE_TYPE:
        return {"type": "null"}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_schema(args[0])
    if origin in _UNION_ORIGINS:
        return _union_schema([type_schema(arg) for arg in args])
    if origin is typing.Literal:
        return _enum_schema(list(args))
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            return _array_schema(args[0])
        if args == ((),):  # tuple[()]: the empty tuple
            return {"type": "array", "maxItems": 0}
        items = [type_schema(arg) for arg in args]
        return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}
    if origin in _SET_ORIGINS:
        return {**_array_schema(args[0] if args else _EMPTY), "uniqueItems": True}
    if origin in _ARRAY_ORIGINS:
        return _array_schema(args[0] if args else _EMPTY)
    if origin in _OBJECT_ORIGINS:
        schema: dict[str, Any] = {"type": "object"}
        values = type_schema(args[1]) if len(args) == 2 else {}
        if values:
            schema["additionalProperties"] = values
        return schema
    if not isinstance(annotation, type):
        return {}  # a TypeVar, an unresolved forward reference, Callable[...]: no constraint
    if issubclass(annotation, enum.Enum):
        return _enum_schema([member.value for member in annotation])
    for python_type, json_type in _SCALARS:
        if issubclass(annotation, python_type):
            return {"type": json_type}
    if issubclass(annotation, (set, frozenset)):
        return {"type": "array", "uniqueItems": True}
    if issubclass(annotation, (list, tuple)):
        return {"type": "array"}
    if issubclass(annotation, dict):
        return {"type": "object"}
    return {}


_SCALARS = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


def _array_schema(item: Any) -> dict[str, Any]:
    items = type_schema(item)
    return {"type": "array", "items": items} if items else {"type": "array"}


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    values = [value.value if isinstance(value, enum.Enum) else value for value in values]
    kinds = list(dict.fromkeys(json_type_name(value) for value in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def _union_schema(members: list[dict[str, Any]]) -> dict[str, Any]:
    if any(not member for member in members):
        return {}  # one member accepts anything, so the union does
    if all(set(member) == {"type"} for member in members):
        kinds: list[str] = []
        for member in members:
            for kind in member["type"] if isinstance(member["type"], list) else [member["type"]]:
                if kind not in kinds:
                    kinds.append(kind)
        return {"type": kinds[0] if len(kinds) == 1 else kinds}
    return {"anyOf": members}


# -- functions -> parameters -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ParameterInfo:
    """One parameter of a function as a tool sees it: its resolved annotation, default and JSON schema."""

    name: str
    kind: inspect._ParameterKind
    annotation: Any
    default: Any
    schema: dict[str, Any]

    @property
    def required(self) -> bool:
        """Whether a call must pass this parameter (it has no default)."""
        return self.default is _EMPTY


def parameters_of(fn: Callable[..., Any]) -> tuple[list[ParameterInfo], bool]:
    """The parameters a caller passes by name to ``fn``, and whether ``fn`` also takes ``**kwargs``.

    ``*args`` is left out; a bound method's ``self`` is already gone. Each parameter's ``schema`` holds its
    type constraint plus ``description`` and ``default`` where known.
    """
    signature = _signature(fn)
    _, arg_docs = _parse_docstring(_docstring(fn))
    params: list[ParameterInfo] = []
    var_keyword = False
    for param in signature.parameters.values():
        if param.kind is param.VAR_KEYWORD:
            var_keyword = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        annotation = _resolve(param.annotation, fn)
        schema = type_schema(annotation)
        description = arg_docs.get(param.name) or _annotated_description(annotation)
        if description:
            schema["description"] = description
        if param.default is not _EMPTY:
            default = _json_default(param.default)
            if default is not _EMPTY:
                schema["default"] = default
        params.append(ParameterInfo(param.name, param.kind, annotation, param.default, schema))
    return params, var_keyword


def function_schema(
    fn: Callable[..., Any], name: str | None = None, description: str | None = None
) -> dict[str, Any]:
    """The OpenAI function-calling schema of ``fn`` (see the module docstring for the type mapping).

    Args:
        fn: a function, a bound method (``self`` is left out), a ``functools.partial`` or any callable.
        name: the tool's name; defaults to the function's ``__name__``.
        description: the tool's description; defaults to the docstring's first paragraph.
    """
    params, _ = parameters_of(fn)
    if description is None:
        description, _ = _parse_docstring(_docstring(fn))
    return {
        "type": "function",
        "function": {
            "name": name or _function_name(fn),
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {param.name: param.schema for param in params},
                "required": [param.name for param in params if param.required],
            },
        },
    }


def _unpartial(fn: Callable[..., Any]) -> Callable[..., Any]:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def _function_name(fn: Callable[..., Any]) -> str:
    fn = _unpartial(fn)
    return getattr(fn, "__name__", None) or type(fn).__name__


def _docstring(fn: Callable[..., Any]) -> str:
    return inspect.getdoc(_unpartial(fn)) or ""


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(fn, eval_str=True)
    except Exception:  # an annotation that does not evaluate: resolve what we can one by one
        return inspect.signature(fn)


def _resolve(annotation: Any, fn: Callable[..., Any]) -> Any:
    """Evaluate a string annotation left over by a failed ``eval_str``; unresolvable means no constraint."""
    if not isinstance(annotation, str):
        return annotation
    target = inspect.unwrap(_unpartial(fn))
    namespace = getattr(target, "__globals__", {})
    try:
        return eval(annotation, dict(namespace))  # the function's own annotation, as eval_str would
    except Exception:
        return _EMPTY


def _annotated_description(annotation: Any) -> str:
    if typing.get_origin(annotation) is typing.Annotated:
        for extra in typing.get_args(annotation)[1:]:
            if isinstance(extra, str):
                return extra
    return ""


def _json_default(value: Any) -> Any:
    """The default as JSON (an ``Enum`` as its value, a tuple as a list), or ``_EMPTY`` if it has none."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return _EMPTY


# -- docstrings --------------------------------------------------------------------------------------------
_ARGS_HEADERS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "kwargs"}
_SECTION = re.compile(r"^([A-Za-z][A-Za-z ]{0,30}):\s*$")
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)$")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph (as one line) and the ``Args:`` descriptions of a Google-style docstring."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary.append(line.strip())

    arg_docs: dict[str, str] = {}
    in_args = False
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        indent = len(line) - len(line.lstrip())
        header = _SECTION.match(line)
        if header and indent == 0:
            in_args = header.group(1).strip().lower() in _ARGS_HEADERS
            entry_indent, current = None, None
            continue
        if not in_args or not line.strip():
            continue
        if indent == 0:  # text back at the margin ends the section
            in_args, current = False, None
            continue
        if entry_indent is None:
            entry_indent = indent
        entry = _ARG_LINE.match(line.strip()) if indent == entry_indent else None
        if entry:
            current = entry.group(1)
            arg_docs[current] = entry.group(2).strip()
        elif current is not None and indent > entry_indent:
            arg_docs[current] = f"{arg_docs[current]} {line.strip()}".strip()
    return " ".join(summary), arg_docs


# -- checking and converting values ------------------------------------------------------------------------
def json_type_name(value: Any) -> str:
    """The JSON type of a Python value: null, boolean, integer, number, string, array or object."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _has_type(value: Any, kind: str) -> bool:
    actual = json_type_name(value)
    if kind == "number":
        return actual in ("integer", "number")
    if kind == "integer":  # JSON Schema counts 3.0 as an integer
        return actual == "integer" or (actual == "number" and value.is_integer())
    return actual == kind


def describe_schema(schema: dict[str, Any]) -> str:
    """A short English description of a schema's type, for error messages ("array of integer")."""
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(value, default=str) for value in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(describe_schema(member) for member in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return "any value"
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and "prefixItems" in schema:
        return "array of [" + ", ".join(describe_schema(item) for item in schema["prefixItems"]) + "]"
    if kind == "array" and "items" in schema:
        return f"array of {describe_schema(schema['items'])}"
    if kind == "object" and "additionalProperties" in schema:
        return f"object of {describe_schema(schema['additionalProperties'])}"
    return kind


def _show(value: Any) -> str:
    kind = json_type_name(value)
    if kind in ("array", "object"):
        return kind
    if isinstance(value, str) and len(value) > 40:
        value = value[:40] + "..."
    try:
        return f"{kind} {json.dumps(value, ensure_ascii=False)}"
    except (TypeError, ValueError):
        return kind


def validate_value(value: Any, schema: dict[str, Any], path: str = "value") -> str | None:
    """Check ``value`` against ``schema``; ``None`` if it fits, else a message naming ``path`` and the type.

    Understands the subset of JSON Schema that :func:`type_schema` writes: ``type``, ``enum``, ``anyOf``,
    ``items``, ``prefixItems``, ``minItems``/``maxItems`` and ``additionalProperties``.
    """
    mismatch = f"'{path}' expected {describe_schema(schema)}, got {_show(value)}"
    if "anyOf" in schema:
        if any(validate_value(value, member, path) is None for member in schema["anyOf"]):
            return None
        return mismatch
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_has_type(value, k) for k in kinds):
            return mismatch
    if "enum" in schema:
        actual = json_type_name(value)
        if not any(value == option and json_type_name(option) == actual for option in schema["enum"]):
            return mismatch
    if isinstance(value, (list, tuple)):
        count = len(value)
        if count < schema.get("minItems", 0) or count > schema.get("maxItems", count):
            return f"{mismatch} of {count} items"
        for index, item in enumerate(value):
            prefix = schema.get("prefixItems")
            item_schema = prefix[index] if prefix is not None and index < len(prefix) else schema.get("items")
            if item_schema:
                problem = validate_value(item, item_schema, f"{path}[{index}]")
                if problem:
                    return problem
    if isinstance(value, dict) and schema.get("additionalProperties"):
        for key, item in value.items():
            problem = validate_value(item, schema["additionalProperties"], f"{path}[{json.dumps(key)}]")
            if problem:
                return problem
    return None


def coerce_value(value: Any, annotation: Any) -> Any:
    """Convert a value that passed :func:`validate_value` to the annotated Python type where JSON differs.

    JSON has no enums, tuples or sets and does not tell 3 from 3.0: an ``Enum`` parameter receives the
    member, a ``tuple``/``set`` parameter a tuple/set, an ``int`` one an ``int`` and a ``float`` one a
    ``float``. Everything else is passed through unchanged.
    """
    if annotation is _EMPTY or annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return coerce_value(value, args[0])
    if origin in _UNION_ORIGINS:
        for member in args:
            if validate_value(value, type_schema(member)) is None:
                return coerce_value(value, member)
        return value
    if isinstance(annotation, type) and origin is None:
        if issubclass(annotation, enum.Enum):
            try:
                return annotation(value)
            except ValueError:
                return value
        if annotation is float and type(value) is int:
            return float(value)
        if annotation is int and type(value) is float and value.is_integer():
            return int(value)
        if annotation in (tuple, set, frozenset) and isinstance(value, list):
            return annotation(value)
        return value
    if isinstance(value, (list, tuple)):
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(coerce_value(item, args[0]) for item in value)
            if args and args != ((),):
                return tuple(coerce_value(item, arg) for item, arg in zip(value, args, strict=False))
            return tuple(value)
        item_type = args[0] if args else _EMPTY
        items = [coerce_value(item, item_type) for item in value]
        if origin in _SET_ORIGINS:
            return frozenset(items) if origin is frozenset else set(items)
        if origin in _ARRAY_ORIGINS:
            return items
    if isinstance(value, dict) and origin in _OBJECT_ORIGINS and len(args) == 2:
        return {key: coerce_value(item, args[1]) for key, item in value.items()}
    return value
