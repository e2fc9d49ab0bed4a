"""Input schemas for Python tools: derived from a signature, and checked on every call.

:func:`schema_for_function` turns a function's annotations into the JSON Schema the host shows
the script; :func:`compile_check` turns such a schema into a fast function that says what is
wrong with a value, so a call like ``tools.add({a: "x", b: 2})`` is refused with
``argument 'a' must be an integer, got 'x'`` instead of failing somewhere inside the tool.

Only the schema subset derived here is checked (types, ``anyOf``, ``enum``, array items and
lengths, objects); ``{}`` accepts anything, and so does whatever the derivation could not
express. A schema given by hand is the tool's own business and is not checked.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union, get_args, get_origin

__all__ = [
    "Check",
    "anything",
    "compile_check",
    "schema_for_annotation",
    "schema_for_function",
]

#: What is wrong with a value (a phrase such as ``"must be an integer, got 'x'"``), or None.
Check = Callable[[Any], "str | None"]

_SCALARS: dict[Any, dict[str, Any]] = {
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def schema_for_annotation(annotation: Any) -> dict[str, Any]:
    """A JSON Schema for a type annotation (permissive ``{}`` for what it cannot express)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (Union, types.UnionType):
        return {"anyOf": [schema_for_annotation(arg) for arg in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if annotation in (list, tuple) or origin in (list, tuple):
        schema: dict[str, Any] = {"type": "array"}
        if origin is list and args:
            schema["items"] = schema_for_annotation(args[0])
        elif origin is tuple and len(args) == 2 and args[1] is Ellipsis:
            schema["items"] = schema_for_annotation(args[0])  # tuple[X, ...]: any length of X
        elif origin is tuple and args:
            # tuple[X, Y]: exactly these positions.
            schema["prefixItems"] = [schema_for_annotation(arg) for arg in args]
            schema["minItems"] = schema["maxItems"] = len(args)
        return schema
    if annotation is dict or origin in (dict, Mapping):
        return {"type": "object"}
    return {}


def _resolved_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Type hints, resolved where possible.

    Unresolvable ones (a name that only exists under ``TYPE_CHECKING`` or inside a function)
    become ``Any`` instead of failing the registration.
    """
    try:
        return typing.get_type_hints(function)
    except Exception:
        pass
    hints: dict[str, Any] = {}
    namespace = getattr(function, "__globals__", {})
    for name, annotation in getattr(function, "__annotations__", {}).items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)
            except Exception:
                annotation = Any
        hints[name] = annotation
    return hints


def schema_for_function(function: Callable[..., Any]) -> dict[str, Any]:
    """Derive an object input schema from a function's keyword-compatible parameters."""
    hints = _resolved_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        argument = schema_for_annotation(hints.get(name, parameter.annotation))
        if parameter.default is None and not _allows_null(argument):
            # `limit: int = None`, the implicit-Optional style: null is what the default means.
            argument = {"anyOf": [argument, {"type": "null"}]}
        properties[name] = argument
        if parameter.default is parameter.empty:
            required.append(name)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def _allows_null(schema: dict[str, Any]) -> bool:
    if not schema or schema.get("type") == "null":
        return True
    if "enum" in schema:
        return None in schema["enum"]
    return any(_allows_null(option) for option in schema.get("anyOf", ()))


# --------------------------------------------------------------------------- checking

# JSON has no separate boolean-is-an-integer rule: True must not pass as an integer, although
# Python's bool is a subclass of int.
_TYPE_TESTS: dict[str, tuple[Callable[[Any], bool], str]] = {
    # JSON Schema's integer is any number without a fraction; JavaScript writes 2**70 as
    # 1.1805916207174113e+21, which Python reads as a float.
    "integer": (lambda v: type(v) is int or (type(v) is float and v.is_integer()), "an integer"),
    "number": (lambda v: type(v) is int or type(v) is float, "a number"),
    "string": (lambda v: type(v) is str, "a string"),
    "boolean": (lambda v: type(v) is bool, "a boolean"),
    "null": (lambda v: v is None, "null"),
    # Decoded JSON only has lists; a tuple comes from Python code calling invoke_tool itself.
    "array": (lambda v: type(v) is list or type(v) is tuple, "an array"),
    "object": (lambda v: type(v) is dict, "an object"),
}


def anything(value: Any) -> None:
    """The check of a schema that accepts every value."""
    return None


def _got(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def compile_check(schema: Any) -> Check:
    """A function saying what is wrong with a value against ``schema`` (None when nothing)."""
    if not isinstance(schema, dict) or not schema:
        return anything
    if "anyOf" in schema:
        return _any_of(schema["anyOf"])
    if "enum" in schema:
        allowed = list(schema["enum"])

        def check_enum(value: Any) -> str | None:
            # Compare type and value: 1 == True in Python, but not in JSON.
            if any(type(value) is type(choice) and value == choice for choice in allowed):
                return None
            return f"must be one of {', '.join(map(repr, allowed))}; got {_got(value)}"

        return check_enum
    kind = schema.get("type")
    if kind not in _TYPE_TESTS:
        return anything
    test, expected = _TYPE_TESTS[kind]
    if kind != "array":

        def check_type(value: Any) -> str | None:
            return None if test(value) else f"must be {expected}, got {_got(value)}"

        return check_type
    return _array_check(schema)


def _any_of(schemas: list[Any]) -> Check:
    options = [(option, compile_check(option)) for option in schemas]
    if any(check is anything for _, check in options):
        return anything
    described = " or ".join(_describe(option) for option in schemas)

    def check_any_of(value: Any) -> str | None:
        if any(check(value) is None for _, check in options):
            return None
        # When only one choice has the value's JSON type, its own complaint is the useful
        # one: "item 1 must be an integer", not "must be an array or null" for an array.
        typed = [check for option, check in options if _has_type_of(option, value)]
        if len(typed) == 1:
            return typed[0](value)
        return f"must be {described}, got {_got(value)}"

    return check_any_of


def _has_type_of(schema: Any, value: Any) -> bool:
    if not isinstance(schema, dict) or schema.get("type") not in _TYPE_TESTS:
        return False
    return _TYPE_TESTS[schema["type"]][0](value)


def _describe(schema: Any) -> str:
    if isinstance(schema, dict):
        if schema.get("type") in _TYPE_TESTS:
            return _TYPE_TESTS[schema["type"]][1]
        if "enum" in schema:
            return "one of " + ", ".join(map(repr, schema["enum"]))
    return "a value of another shape"


def _array_check(schema: dict[str, Any]) -> Check:
    items = compile_check(schema.get("items"))
    positions = [compile_check(option) for option in schema.get("prefixItems", ())]
    low = schema.get("minItems", 0)
    high = schema.get("maxItems")

    def check_array(value: Any) -> str | None:
        if type(value) is not list and type(value) is not tuple:
            return f"must be an array, got {_got(value)}"
        if len(value) < low or (high is not None and len(value) > high):
            size = str(low) if low == high else f"{low} to {high if high is not None else 'any'}"
            return f"must have {size} items, got {len(value)}"
        if items is anything and not positions:
            return None
        for index, item in enumerate(value):
            check = positions[index] if index < len(positions) else items
            problem = check(item)
            if problem is not None:
                return f"item {index} {problem}"
        return None

    return check_array
