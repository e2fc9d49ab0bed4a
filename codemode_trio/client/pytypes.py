"""Types users already write, made into types pydantic validates and describes.

pydantic takes dataclasses, models and ``typing_extensions.TypedDict``. :func:`supported` also
lets a tool's parameters and return type use:

- ``typing.TypedDict`` on Python 3.11, which pydantic refuses there: it is rebuilt as a
  ``typing_extensions.TypedDict`` with the same keys, types and required/optional split;
- attrs classes: a pydantic model with the same fields (named as the attributes, defaults
  kept) stands in for the schema, and a validated input is turned back into the attrs class;
- for results, :class:`~codemode_trio.TextItem`, :class:`~codemode_trio.ImageItem` and
  :class:`~codemode_trio.AudioItem`, described as the MCP content blocks :func:`content_block`
  turns them into.

The rewriting goes through ``Annotated``, unions, ``list[...]``, ``dict[..., ...]`` and the other
generic aliases, and into the fields of the TypedDicts and attrs classes it rebuilds. A
recursive TypedDict or attrs class is refused with :class:`TypeError`.
"""

from __future__ import annotations

import base64
import binascii
import sys
import types
import typing
import urllib.parse
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, Required, Union

import attrs
import pydantic
import typing_extensions

from ..protocol.content import AudioItem, ImageItem, TextItem

__all__ = ["IMAGE_DETAIL_META", "content_block", "result_fallback", "supported"]

#: The ``_meta`` key of an MCP image block that the host reads as the image's detail.
IMAGE_DETAIL_META = "codex/imageDetail"

# Called as a function (keys such as "_meta" are not identifiers), which mypy cannot check.
_typed_dict: Any = typing_extensions.TypedDict

_BLOCK_TYPES: dict[type, Any] = {
    TextItem: _typed_dict("TextContent", {"type": Literal["text"], "text": str}),
    ImageItem: _typed_dict(
        "ImageContent",
        {
            "type": Literal["image"],
            "data": str,
            "mimeType": str,
            "_meta": NotRequired[
                _typed_dict(
                    "ImageMeta", {"codex/imageDetail": Literal["auto", "low", "high", "original"]}
                )
            ],
        },
    ),
    AudioItem: _typed_dict(
        "AudioContent", {"type": Literal["audio"], "data": str, "mimeType": str}
    ),
}


def supported(annotation: Any, *, result: bool) -> Any:
    """``annotation`` with the types above replaced (the same object when there are none).

    ``result`` says the annotation is a return type, where content items are MCP blocks.
    """
    return _Rewriter(result).rewrite(annotation)


class _Rewriter:
    def __init__(self, result: bool) -> None:
        self.result = result
        self.done: dict[Any, Any] = {}
        self.building: set[Any] = set()

    def rewrite(self, annotation: Any) -> Any:
        if isinstance(annotation, type):
            return self.rewrite_class(annotation)
        origin = typing.get_origin(annotation)
        if origin is None:
            return annotation
        arguments = typing.get_args(annotation)
        if origin is Annotated:
            inner = self.rewrite(arguments[0])
            if inner is arguments[0]:
                return annotation
            return Annotated[(inner, *annotation.__metadata__)]
        if origin is Literal:
            return annotation
        rewritten = tuple(self.rewrite(argument) for argument in arguments)
        if all(new is old for new, old in zip(rewritten, arguments, strict=True)):
            return annotation
        if origin in (Union, types.UnionType):
            return Union[rewritten]  # noqa: UP007 (a runtime union of computed members)
        if isinstance(annotation, types.GenericAlias):
            return types.GenericAlias(origin, rewritten)
        copy_with = getattr(annotation, "copy_with", None)
        return annotation if copy_with is None else copy_with(rewritten)

    def rewrite_class(self, cls: type) -> Any:
        if self.result and cls in _BLOCK_TYPES:
            return _BLOCK_TYPES[cls]
        if cls in self.done:
            return self.done[cls]
        # typing.TypedDict is what pydantic refuses before 3.12; typing_extensions' it takes.
        if sys.version_info < (3, 12) and typing.is_typeddict(cls):
            make: Callable[[type], Any] = self.typeddict
        elif attrs.has(cls):
            make = self.attrs_class
        else:
            return cls
        if cls in self.building:
            raise TypeError(f"{cls.__qualname__} refers to itself, which is not supported here")
        self.building.add(cls)
        try:
            replacement = make(cls)
        finally:
            self.building.discard(cls)
        self.done[cls] = replacement
        return replacement

    def typeddict(self, cls: type) -> Any:
        hints = typing.get_type_hints(cls, include_extras=True)
        required: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        fields: dict[str, Any] = {}
        for key, hint in hints.items():
            # An explicit Required/NotRequired wins: under `from __future__ import annotations`
            # 3.11 cannot see it when the class is made, and __required_keys__ misses it.
            qualifier = typing.get_origin(hint)
            needed = qualifier is Required or (qualifier is not NotRequired and key in required)
            bare = self.rewrite(_strip_requiredness(hint))
            fields[key] = Required[bare] if needed else NotRequired[bare]
        rebuilt = _typed_dict(cls.__name__, fields)
        rebuilt.__doc__ = cls.__doc__
        rebuilt.__module__ = cls.__module__
        return rebuilt

    def attrs_class(self, cls: type) -> Any:
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except Exception:
            hints = {}
        definitions: dict[str, Any] = {}
        aliases: list[tuple[str, str]] = []
        for index, field in enumerate(attrs.fields(cls)):
            if not field.init:
                continue
            hint = hints.get(field.name, field.type)
            annotation = Any if hint is None or isinstance(hint, str) else self.rewrite(hint)
            model_field = f"field_{index}"  # attribute names may clash with BaseModel's own
            info: dict[str, Any] = {"alias": field.name}
            default: Any = field.default  # an attrs Factory, attrs.NOTHING or a value
            if type(default) is _FACTORY:
                if getattr(default, "takes_self", False):
                    info["default"] = None  # computed by the class itself when omitted
                else:
                    info["default_factory"] = getattr(default, "factory", None)
            elif default is not attrs.NOTHING:
                info["default"] = default
            definitions[model_field] = (annotation, pydantic.Field(**info))
            aliases.append((model_field, field.alias))
        config = pydantic.ConfigDict(strict=True, extra="forbid")
        model = pydantic.create_model(
            cls.__name__, __config__=config, __doc__=cls.__doc__, **definitions
        )

        def build(instance: pydantic.BaseModel) -> Any:
            given = instance.model_fields_set
            # Only what the input gave: attrs computes its own defaults for the rest.
            return cls(**{alias: getattr(instance, f) for f, alias in aliases if f in given})

        if self.result:
            return model  # only its schema is used; results are converted by result_fallback
        return Annotated[model, pydantic.AfterValidator(build)]


# attrs.Factory is a function to mypy; the class of what it returns is what defaults are.
_FACTORY: type = type(attrs.Factory(list))


def _strip_requiredness(hint: Any) -> Any:
    while typing.get_origin(hint) in (Required, NotRequired):
        hint = typing.get_args(hint)[0]
    return hint


def content_block(item: TextItem | ImageItem | AudioItem) -> dict[str, Any]:
    """The MCP content block JavaScript's ``content()``, ``image()`` and ``audio()`` accept.

    ``TextItem`` is ``{type: "text", text}``; an image or audio item's ``data:`` URI becomes
    ``{type, data, mimeType}`` (base64 data), an image's ``detail`` the block's
    ``_meta["codex/imageDetail"]``, which the host reads back. Raises :class:`ValueError` for a
    URL that is not a ``data:`` URI.
    """
    if type(item) is TextItem:
        return {"type": "text", "text": item.text}
    if type(item) is ImageItem:
        mime, data = _split_data_uri(item.image_url, "ImageItem.image_url")
        block: dict[str, Any] = {"type": "image", "data": data, "mimeType": mime}
        if item.detail is not None:
            block["_meta"] = {IMAGE_DETAIL_META: item.detail}
        return block
    if type(item) is not AudioItem:
        raise TypeError(f"not a content item: {item!r:.60}")
    mime, data = _split_data_uri(item.audio_url, "AudioItem.audio_url")
    return {"type": "audio", "data": data, "mimeType": mime}


def _split_data_uri(url: str, what: str) -> tuple[str, str]:
    """(media type, base64 data) of a ``data:`` URI; a percent-encoded payload is encoded."""
    scheme, colon, rest = url.partition(":")
    header, comma, payload = rest.partition(",")
    if scheme.lower() != "data" or not colon or not comma:
        shown = url if len(url) <= 40 else url[:37] + "..."
        raise ValueError(f"{what} must be a data: URI (the host takes no other), got {shown!r}")
    mime, semicolon, last = header.rpartition(";")
    if semicolon and last.lower() == "base64":
        try:
            base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise ValueError(f"{what} is not valid base64") from None
        data = payload
    else:
        mime = header
        data = base64.b64encode(urllib.parse.unquote_to_bytes(payload)).decode("ascii")
    return mime or "application/octet-stream", data


def result_fallback(value: Any) -> Any:
    """What pydantic's serializer calls for a value it does not know: content items, attrs.

    Raises :class:`ValueError` (as the serializer does) for anything else.
    """
    if type(value) in _BLOCK_TYPES:
        return content_block(value)
    if attrs.has(type(value)):
        fields: dict[str, Any] = {}
        for field in attrs.fields(type(value)):
            try:
                fields[field.name] = getattr(value, field.name)
            except AttributeError:
                # An init=False field never set: say so rather than fail the call obscurely.
                raise ValueError(f"{type(value).__name__}.{field.name} is not set") from None
        return fields
    raise ValueError(f"Unable to serialize unknown type: {type(value)}")
