"""Tool input schemas, argument validation and result conversion, done by pydantic.

:func:`compile_signature` turns an async function into a :class:`ToolSignature`: the JSON Schema
the host shows the script, and :meth:`ToolSignature.arguments`, which validates one call's input
and converts it to the annotated types (a dataclass argument arrives as that dataclass). Any
annotation pydantic supports works, and ``Annotated[..., Field(description=...)]`` as well as
Google, NumPy and reST docstrings describe the parameters.

Validation is JSON-strict, because the input is JSON written by JavaScript: ``"1"`` is not an
integer and ``true`` is not a number, but an object is accepted for a dataclass, ``TypedDict``
or model, and an integral number for an ``int`` (JavaScript writes ``2**70`` as
``1.1805916207174113e+21``, which decodes as a float). Unknown argument names are refused.
Plain ``int``/``bool``/``str``/``float`` parameters given values of exactly those types (the
common call) are passed on without pydantic, which would return them unchanged.

This module imports pydantic; :mod:`codemode_trio.client.registry` imports it only when the
first tool is registered, so code that never registers a tool does not pay for pydantic.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import types
import typing
import warnings
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Union

import attrs
import pydantic
import pydantic_core
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from ..protocol.values import JSON, U64_MAX
from .delegates import ToolError
from .pytypes import result_fallback, supported

__all__ = [
    "ArgumentError",
    "ToolSignature",
    "compile_output_schema",
    "compile_signature",
    "jsonable_result",
]


class ArgumentError(ToolError):
    """A call's input does not fit the tool's signature.

    The message names the tool and the argument path, on one line, and is what JavaScript sees.
    """


class _CompactSchema(GenerateJsonSchema):
    """pydantic's JSON Schema without a generated ``title`` on every field.

    A title per property ("A", "Items") only repeats the property name to the script; class
    titles inside ``$defs`` stay, since they name the user's types.
    """

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _resolved_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Type hints with ``Annotated`` kept, resolved where possible.

    Unresolvable ones (a name that only exists under ``TYPE_CHECKING`` or inside a function)
    become ``Any`` instead of failing the registration.
    """
    with contextlib.suppress(Exception):
        return typing.get_type_hints(function, include_extras=True)
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


def _allows_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is type(None) or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _allows_none(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return any(_allows_none(arg) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return None in typing.get_args(annotation)
    return False


def _has_description(annotation: Any) -> bool:
    return typing.get_origin(annotation) is Annotated and any(
        isinstance(extra, FieldInfo) and extra.description is not None
        for extra in annotation.__metadata__
    )


def _docstring_descriptions(function: Callable[..., Any]) -> dict[str, str]:
    doc = inspect.getdoc(function)
    if not doc:
        return {}
    import docstring_parser

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return {}
    return {p.arg_name: p.description for p in parsed.params if p.description}


def describe_function(function: Callable[..., Any]) -> str:
    """The tool description a docstring gives: its summary line (``""`` without one)."""
    doc = inspect.getdoc(function)
    if not doc:
        return ""
    import docstring_parser

    try:
        summary = docstring_parser.parse(doc).short_description
    except docstring_parser.ParseError:
        summary = None
    return summary or doc.strip().splitlines()[0]


@attrs.frozen
class ToolSignature:
    """How one tool's input becomes its arguments."""

    name: str
    #: The input JSON Schema for the host.
    schema: dict[str, Any]
    model: type[pydantic.BaseModel]
    #: True when the function's single parameter is a model taking the whole input object.
    whole_input: bool
    #: (model field, argument name, passed by position) for each named parameter, in order;
    #: for a whole-input model, its one parameter.
    fields: tuple[tuple[str, str, bool], ...]
    #: When every parameter is a plain ``int``, ``bool``, ``str`` or ``float``: (argument name,
    #: passed by position, type, required) for each, in order.
    plain: tuple[tuple[str, bool, type, bool], ...] | None = None

    def arguments(self, data: JSON) -> tuple[list[Any], dict[str, Any]]:
        """Validate one call's input; return the converted positional and keyword arguments.

        Raises :class:`ArgumentError` with a one-line message naming the argument's path.
        """
        if data is None and not self.whole_input:
            data = {}  # `tools.f()` sends null
        if type(data) is not dict:
            raise ArgumentError(
                f"tool {self.name!r}: expects an object input, got {_shorten(data)}"
            )
        if self.plain is not None:
            # Scalars of exactly the declared types need no conversion, and pydantic's strict
            # mode takes them as they are: skip it (the common call). Anything else (a missing,
            # extra or mistyped argument, a non-ASCII string, a huge integer) is left to
            # pydantic. Inline, not a helper: this runs once per tool call.
            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            for argument, by_position, kind, required in self.plain:
                if argument not in data:
                    if required:
                        break
                    continue
                value = data[argument]
                if (found := type(value)) is not kind:
                    break
                if found is int:
                    if not -U64_MAX <= value <= U64_MAX:
                        break
                elif found is str:
                    if not value.isascii():
                        break
                elif found is float and value - value != 0.0:
                    break  # NaN or an infinity
                if by_position:
                    args.append(value)
                else:
                    kwargs[argument] = value
            else:
                if len(args) + len(kwargs) == len(data):  # else an unknown argument
                    return args, kwargs
        instance = self._validate(data)
        if self.whole_input:
            _, argument, by_position = self.fields[0]
            return ([instance], {}) if by_position else ([], {argument: instance})
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        given = instance.model_fields_set
        for field, argument, by_position in self.fields:
            # An omitted argument is left to the function's own default.
            if field not in given:
                continue
            value = getattr(instance, field)
            if by_position:
                positional.append(value)
            else:
                keywords[argument] = value
        keywords.update(instance.__pydantic_extra__ or {})
        return positional, keywords

    def _validate(self, data: dict[str, Any]) -> pydantic.BaseModel:
        # Validating JSON text, not the decoded dict, is what makes pydantic JSON-strict and
        # still take an object for a dataclass or model; the re-encoding is done in Rust.
        validator = self.model.__pydantic_validator__
        try:
            text = pydantic_core.to_json(data)
        except pydantic_core.PydanticSerializationError as exc:  # a lone surrogate, a set...
            raise ArgumentError(
                f"tool {self.name!r}: input is not JSON: {_first_line(exc)}"
            ) from None
        try:
            return validator.validate_json(text, strict=True)  # type: ignore[no-any-return]
        except pydantic.ValidationError as first:
            problem = first
        fixed = _integral_floats_as_ints(data)
        if fixed is not data:
            try:
                return validator.validate_json(pydantic_core.to_json(fixed), strict=True)  # type: ignore[no-any-return]
            except pydantic.ValidationError as again:
                problem = again
        reason = _describe(problem, data, whole_input=self.whole_input)
        raise ArgumentError(f"tool {self.name!r}: {reason}")


def compile_signature(
    function: Callable[..., Any], *, name: str, whole_input: bool = False
) -> ToolSignature:
    """Build the schema and validator of ``function``'s parameters.

    Raises :class:`TypeError` for a signature pydantic cannot validate (the message names the
    tool and the parameter).
    """
    parameters = inspect.signature(function).parameters
    hints = _resolved_hints(function)
    if whole_input:
        return _compile_whole_input(function, name, parameters, hints)
    descriptions = _docstring_descriptions(function)
    definitions: dict[str, Any] = {}
    fields: list[tuple[str, str, bool]] = []
    plain: list[tuple[str, bool, type, bool]] = []
    extra_type: Any = None
    for index, (argument, parameter) in enumerate(parameters.items()):
        annotation = Any if parameter.annotation is parameter.empty else hints.get(argument, Any)
        try:
            # typing.TypedDict on 3.11 and attrs classes, as pydantic can take them.
            annotation = supported(annotation, result=False)
        except (TypeError, NameError) as exc:
            raise TypeError(f"tool {name!r}: parameter {argument!r}: {exc}") from None
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue  # an object input has nothing to spread into *args
        if parameter.kind is parameter.VAR_KEYWORD:
            extra_type = annotation
            continue
        if parameter.default is None and not _allows_none(annotation):
            # `limit: int = None`, the implicit-Optional style: null is what the default means.
            annotation = annotation | None
        field = f"argument_{index}"  # argument names may clash with BaseModel's own
        info: dict[str, Any] = {"alias": argument}
        if parameter.default is not parameter.empty:
            info["default"] = parameter.default
        if argument in descriptions and not _has_description(annotation):
            info["description"] = descriptions[argument]
        definitions[field] = (annotation, pydantic.Field(**info))
        fields.append((field, argument, parameter.kind is parameter.POSITIONAL_ONLY))
        if type(annotation) is type and annotation in (int, bool, str, float):
            required = parameter.default is parameter.empty
            plain.append((argument, fields[-1][2], annotation, required))
    config = pydantic.ConfigDict(strict=True, extra="forbid" if extra_type is None else "allow")
    namespace: dict[str, Any] = {"model_config": config}
    if extra_type is not None:
        # A **kwargs parameter: further names are accepted, each validated as its annotation.
        namespace["__annotations__"] = {"__pydantic_extra__": dict[str, extra_type]}
    model: type[pydantic.BaseModel]
    try:
        base = type(f"{name}_base", (pydantic.BaseModel,), namespace)
        model = pydantic.create_model(f"{name}_arguments", __base__=base, **definitions)
    except (pydantic.PydanticUserError, pydantic.PydanticSchemaGenerationError) as exc:
        reason = _first_line(exc)
        raise TypeError(f"tool {name!r}: pydantic cannot validate its arguments: {reason}") from exc
    simple = extra_type is None and len(plain) == len(fields)
    schema = _schema_of(name, model)
    return ToolSignature(
        name, schema, model, False, tuple(fields), tuple(plain) if simple else None
    )


def compile_output_schema(function: Callable[..., Any]) -> dict[str, Any] | None:
    """The JSON Schema of ``function``'s results, from its return annotation, or None.

    None (no schema: the result is ``unknown`` to the script) for a function without a return
    annotation, one returning ``None`` or ``Any``, and a return type pydantic cannot describe;
    results are converted, not validated, so such a type does not stop the registration.
    Content items (``TextItem``, ``ImageItem``, ``AudioItem``) are described as the MCP blocks
    they are sent as.
    """
    if "return" not in getattr(function, "__annotations__", {}):
        return None
    annotation = _resolved_hints(function).get("return", Any)
    if annotation is None or annotation is type(None) or annotation is Any:
        return None
    try:
        adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
            supported(annotation, result=True)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
            schema = adapter.json_schema(mode="serialization", schema_generator=_CompactSchema)
    except (
        TypeError,
        NameError,
        pydantic.PydanticUserError,
        pydantic_core.PydanticSerializationError,
    ):
        return None
    return schema or None


def _compile_whole_input(
    function: Callable[..., Any],
    name: str,
    parameters: Mapping[str, inspect.Parameter],
    hints: dict[str, Any],
) -> ToolSignature:
    named = [p for p in parameters.values() if p.default is p.empty]
    annotation = hints.get(named[0].name) if len(named) == 1 else None
    if not (isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)):
        raise TypeError(
            f"tool {name!r}: model_input=True needs a function whose one required parameter "
            "is annotated with a pydantic model"
        )
    by_position = named[0].kind is not inspect.Parameter.KEYWORD_ONLY
    field = ("", named[0].name, by_position)
    return ToolSignature(name, _schema_of(name, annotation), annotation, True, (field,))


def _schema_of(name: str, model: type[pydantic.BaseModel]) -> dict[str, Any]:
    with warnings.catch_warnings():
        # A default JSON cannot express is left out of the schema; that is all the warning says.
        warnings.simplefilter("ignore", pydantic.json_schema.PydanticJsonSchemaWarning)
        try:
            schema = model.model_json_schema(by_alias=True, schema_generator=_CompactSchema)
        except (pydantic.PydanticUserError, pydantic_core.PydanticSerializationError) as exc:
            reason = _first_line(exc)
            raise TypeError(f"tool {name!r}: no JSON Schema for its arguments: {reason}") from exc
    if model.__name__.endswith("_arguments"):
        schema.pop("title", None)  # the generated model's name means nothing to the script
    schema.setdefault("properties", {})
    return schema


# --------------------------------------------------------------------------- error messages


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


def _describe(error: pydantic.ValidationError, data: Any, *, whole_input: bool) -> str:
    """One line for the script: the first problem's argument path and what is wrong there."""
    problems = error.errors(include_url=False, include_context=False)
    paths = [_path(problem, data) for problem in problems]
    first = paths[0]
    # A union reports one problem per member at the same place: say them as one.
    messages = [problems[i]["msg"] for i, path in enumerate(paths) if path == first]
    kind = problems[0]["type"]
    more = sum(1 for path in paths if path != first)
    tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    named = {"missing": "missing required argument", "extra_forbidden": "unexpected argument"}
    if len(first) == 1 and not whole_input and kind in named:
        return f"{named[kind]} {first[0]!r}{tail}"
    text = _join_messages(messages)
    if not first:
        return f"input: {text}{tail}"
    return f"argument {_render(first)!r}: {text}{tail}"


def _join_messages(messages: list[str]) -> str:
    unique = list(dict.fromkeys(messages))
    prefix = "Input should be "
    if len(unique) > 1 and all(m.startswith(prefix) for m in unique):
        text = prefix + " or ".join(m[len(prefix) :] for m in unique)
    else:
        text = "; ".join(unique)
    return text[:1].lower() + text[1:]


def _path(problem: Mapping[str, Any], data: Any) -> tuple[str | int, ...]:
    """The part of pydantic's location that is a path through the input.

    pydantic also puts the name of a union member (``'int'``, ``'list[str]'``) in the
    location; those steps lead nowhere in the data and are dropped.
    """
    location = problem["loc"]
    path: list[str | int] = []
    here = data
    for step, key in enumerate(location):
        in_object = isinstance(here, dict) and isinstance(key, str) and key in here
        in_array = isinstance(here, list) and isinstance(key, int) and 0 <= key < len(here)
        if in_object or in_array:
            path.append(key)
            here = here[key]
        elif step == len(location) - 1 and problem["type"] == "missing":
            path.append(key)
    return tuple(path)


def _render(path: tuple[str | int, ...]) -> str:
    text = str(path[0])
    for key in path[1:]:
        if isinstance(key, int):
            text += f"[{key}]"
        elif key.isidentifier():
            text += f".{key}"
        else:
            text += f"[{json.dumps(key)}]"
    return text


def _shorten(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _integral_floats_as_ints(value: Any) -> Any:
    """``value`` with every integral float made an int (the same object when there is none)."""
    if type(value) is float:
        return int(value) if value.is_integer() else value
    if type(value) is dict:
        items = {key: _integral_floats_as_ints(item) for key, item in value.items()}
        same = all(items[key] is item for key, item in value.items())
        return value if same else items
    if type(value) is list:
        converted = [_integral_floats_as_ints(item) for item in value]
        same = all(new is old for new, old in zip(converted, value, strict=True))
        return value if same else converted
    return value


# --------------------------------------------------------------------------- results


def jsonable_result(value: Any) -> JSON:
    """Convert a tool's result to JSON values (models, dataclasses, enums, tuples, sets...).

    Raises :class:`ValueError` naming what is not JSON.
    """
    kind = type(value)
    if value is None or kind is str or kind is int or kind is bool:
        return value  # the common results: nothing to convert
    if kind is dict:
        for key, item in value.items():
            # A non-ASCII key may hold a lone surrogate, which pydantic refuses: leave it to it.
            if type(key) is not str or not key.isascii() or type(item) not in _SCALARS:
                break
        else:
            # Strings, integers, booleans and nulls under ASCII keys: JSON already. A copy, as
            # pydantic returns, so that whoever changes the result does not change the tool's.
            return dict(value)
    try:
        # Content items become MCP blocks and attrs instances objects (pytypes.result_fallback).
        converted = pydantic_core.to_jsonable_python(value, fallback=result_fallback)
    except (pydantic_core.PydanticSerializationError, ValueError, RecursionError) as exc:
        raise ValueError(_first_line(exc)) from None
    if (where := _non_finite(converted)) is not None:
        raise ValueError(f"{where} is not a finite number (JSON has no NaN or Infinity)")
    return converted


_SCALARS = frozenset({str, int, bool, type(None)})


def _non_finite(value: Any) -> str | None:
    """The path of the first NaN or infinity in converted JSON values, or None."""
    # Most results have none: look without building paths first.
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float and not math.isfinite(item):
            break
        if kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    else:
        return None
    paths: list[tuple[Any, str]] = [(value, "result")]
    while paths:
        item, where = paths.pop()
        kind = type(item)
        if kind is float and not math.isfinite(item):
            return where
        if kind is dict:
            paths.extend((child, f"{where}[{json.dumps(key)}]") for key, child in item.items())
        elif kind is list:
            paths.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return None
