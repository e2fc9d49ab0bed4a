"""JSON Schema to a TypeScript type, rendered the way Codex shows a tool to the model.

The rules are Codex's (``codex-code-mode-protocol``'s description renderer), so that a model
trained on Codex's prompts reads ours the same way:

- ``true`` is ``unknown``, ``false`` is ``never``; a schema that says nothing is ``unknown``;
- ``const`` and ``enum`` become JSON literals (``"a" | "b"``); ``anyOf``/``oneOf`` join with
  ``|``, ``allOf`` with ``&``; a ``type`` list is a union of its members;
- ``integer`` is ``number``; ``items`` is ``Array<T>``, ``prefixItems`` a tuple;
- an object lists its properties sorted by name, ``?`` on the ones not ``required``, each
  property's ``description`` as ``//`` comments (then one property per line);
  ``additionalProperties`` is an index signature (``false`` none; absent, with no properties,
  ``[key: string]: unknown``);
- a local ``$ref`` (``#`` or ``#/...``, a JSON pointer into the same schema) is expanded in
  place, at most twice along one path, so a recursive type ends in ``unknown``; keywords beside
  a ``$ref`` are intersected with it as ``(ref) & (rest)``;
- a property name that is not a JavaScript identifier is written as a JSON string.

Two deliberate differences. An object with both properties and a typed
``additionalProperties`` gets an index signature widened by the properties' types
(``[key: string]: string | number``), which TypeScript requires of a valid declaration. And a
description is split into comment lines on every line terminator
TypeScript knows (CR, U+2028, U+2029 as well as LF), so that no description can end
its ``//`` comment early and put text into the declaration.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from ..protocol.toolnames import normalize_identifier

__all__ = [
    "MCP_TYPES",
    "comment_lines",
    "mcp_structured_content_schema",
    "render_json_schema_to_typescript",
]

# One level of a recursive shape is shown; the next occurrence on the same path is `unknown`.
_MAX_EXPANSIONS_PER_PATH = 2

# Unicode White_Space, what Rust's str::trim removes (Python's strip() also takes \x1c-\x1f).
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_LINE_BREAK = re.compile("\r\n|[\n\r\u2028\u2029]")

#: The Model Context Protocol result types a ``CallToolResult<...>`` declaration refers to
#: (after the MCP schema's ``CallToolResult`` and its content blocks), declared once.
MCP_TYPES = """\
type Role = "user" | "assistant";
type MetaObject = Record<string, unknown>;
type Annotations = {
  audience?: Role[];
  priority?: number;
  lastModified?: string;
};
type Icon = {
  src: string;
  mimeType?: string;
  sizes?: string[];
  theme?: "light" | "dark";
};
type TextResourceContents = {
  uri: string;
  mimeType?: string;
  _meta?: MetaObject;
  text: string;
};
type BlobResourceContents = {
  uri: string;
  mimeType?: string;
  _meta?: MetaObject;
  blob: string;
};
type TextContent = {
  type: "text";
  text: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ImageContent = {
  type: "image";
  data: string;
  mimeType: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type AudioContent = {
  type: "audio";
  data: string;
  mimeType: string;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ResourceLink = {
  icons?: Icon[];
  name: string;
  title?: string;
  uri: string;
  description?: string;
  mimeType?: string;
  annotations?: Annotations;
  size?: number;
  _meta?: MetaObject;
  type: "resource_link";
};
type EmbeddedResource = {
  type: "resource";
  resource: TextResourceContents | BlobResourceContents;
  annotations?: Annotations;
  _meta?: MetaObject;
};
type ContentBlock =
  | TextContent
  | ImageContent
  | AudioContent
  | ResourceLink
  | EmbeddedResource;
type CallToolResult<TStructured = { [key: string]: unknown }> = {
  _meta?: MetaObject;
  content: ContentBlock[];
  isError?: boolean;
  structuredContent?: TStructured;
  [key: string]: unknown;
};"""


def render_json_schema_to_typescript(schema: Any) -> str:
    """The TypeScript type of values ``schema`` (a decoded JSON Schema) accepts."""
    return _Renderer(schema).render(schema)


def mcp_structured_content_schema(output_schema: Any) -> Any:
    """The ``structuredContent`` schema of an MCP ``CallToolResult`` output schema, or None.

    An output schema is a ``CallToolResult`` when its properties have ``content`` (an array of
    objects), ``isError`` (a boolean) and ``_meta`` (an object); a missing
    ``structuredContent`` is ``true`` (anything).
    """
    properties = output_schema.get("properties") if isinstance(output_schema, dict) else None
    if not isinstance(properties, dict):
        return None
    content = properties.get("content")
    if not isinstance(content, dict) or content.get("type") != "array":
        return None
    items = content.get("items")
    if not isinstance(items, dict) or items.get("type") != "object":
        return None
    for name, kind in (("isError", "boolean"), ("_meta", "object")):
        member = properties.get(name)
        if not isinstance(member, dict) or member.get("type") != kind:
            return None
    return properties.get("structuredContent", True)


class _Renderer:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.expanding: dict[str, int] = {}

    def render(self, schema: Any) -> str:
        if schema is False:
            return "never"
        if isinstance(schema, dict):
            return self.render_map(schema)
        return "unknown"

    def render_map(self, schema: Mapping[str, Any]) -> str:
        if "$ref" in schema:
            return self.render_ref(schema)
        if "const" in schema:
            return _literal(schema["const"])
        values = schema.get("enum")
        if isinstance(values, list) and values:
            return " | ".join(_literal(value) for value in values)
        for key, operator in (("anyOf", " | "), ("oneOf", " | "), ("allOf", " & ")):
            variants = schema.get(key)
            if isinstance(variants, list) and variants:
                return operator.join(self.render(variant) for variant in variants)
        kind = schema.get("type")
        if isinstance(kind, list):
            rendered = [self.render_type(schema, k) for k in kind if isinstance(k, str)]
            if rendered:
                return " | ".join(rendered)
        elif isinstance(kind, str):
            return self.render_type(schema, kind)
        if "properties" in schema or "additionalProperties" in schema or "required" in schema:
            return self.render_object(schema)
        if "items" in schema or "prefixItems" in schema:
            return self.render_array(schema)
        return "unknown"

    def render_ref(self, schema: Mapping[str, Any]) -> str:
        referenced = "unknown"
        reference = schema.get("$ref")
        if isinstance(reference, str) and (reference == "#" or reference.startswith("#/")):
            referenced = self.expand(reference[1:])
        siblings = {k: v for k, v in schema.items() if k not in ("$ref", "$defs", "definitions")}
        beside = self.render_map(siblings)
        if referenced == "unknown":
            return beside
        if beside == "unknown":
            return referenced
        return f"({referenced}) & ({beside})"

    def expand(self, pointer: str) -> str:
        active = self.expanding.get(pointer, 0)
        if active >= _MAX_EXPANSIONS_PER_PATH:
            return "unknown"
        self.expanding[pointer] = active + 1
        try:
            return self.render(_resolve(self.root, pointer))
        finally:
            self.expanding[pointer] = active

    def render_type(self, schema: Mapping[str, Any], kind: str) -> str:
        if kind in ("string", "boolean", "null"):
            return kind
        if kind in ("number", "integer"):
            return "number"
        if kind == "array":
            return self.render_array(schema)
        if kind == "object":
            return self.render_object(schema)
        return "unknown"

    def render_array(self, schema: Mapping[str, Any]) -> str:
        if "items" in schema:
            return f"Array<{self.render(schema['items'])}>"
        members = schema.get("prefixItems")
        if isinstance(members, list) and members:
            return "[" + ", ".join(self.render(member) for member in members) + "]"
        return "unknown[]"

    def render_object(self, schema: Mapping[str, Any]) -> str:
        listed = schema.get("required")
        required = {n for n in listed if isinstance(n, str)} if isinstance(listed, list) else set()
        found = schema.get("properties")
        properties: dict[str, Any] = found if isinstance(found, dict) else {}
        ordered = sorted(properties.items())
        if any(_description(value) for _, value in ordered):
            lines = ["{"]
            for name, value in ordered:
                lines.extend(f"  // {line}" for line in comment_lines(_description(value)))
                lines.append("  " + self.render_property(name, value, required))
            lines.extend(self.index_signature(schema, properties, required, "  "))
            lines.append("}")
            return "\n".join(lines)
        members = [self.render_property(name, value, required) for name, value in ordered]
        members.extend(self.index_signature(schema, properties, required, ""))
        if not members:
            return "{}"
        return "{ " + " ".join(members) + " }"

    def render_property(self, name: str, value: Any, required: set[str]) -> str:
        optional = "" if name in required else "?"
        key = name if normalize_identifier(name) == name else _json(name)
        return f"{key}{optional}: {self.render(value)};"

    def index_signature(
        self,
        schema: Mapping[str, Any],
        properties: Mapping[str, Any],
        required: set[str],
        indent: str,
    ) -> list[str]:
        if "additionalProperties" in schema:
            extra = schema["additionalProperties"]
            if extra is False:
                return []
            kind = "unknown" if extra is True else self.render(extra)
            if kind != "unknown" and properties:
                kind = self.widened(kind, properties, required)
            return [f"{indent}[key: string]: {kind};"]
        if not properties:
            return [f"{indent}[key: string]: unknown;"]
        return []

    def widened(self, kind: str, properties: Mapping[str, Any], required: set[str]) -> str:
        # TypeScript demands that every property fit the index signature: the signature is
        # widened by the properties' own types (Codex writes the extra values' type alone).
        members = [kind]
        for name, value in sorted(properties.items()):
            members.append(self.render(value))
            if name not in required:
                members.append("undefined")
        unique = list(dict.fromkeys(members))
        return " | ".join(f"({m})" if "\n" in m or "|" in m or "&" in m else m for m in unique)


def _description(schema: Any) -> str:
    description = schema.get("description") if isinstance(schema, dict) else None
    return description if isinstance(description, str) else ""


def comment_lines(description: str) -> list[str]:
    """The non-blank lines of ``description``, trimmed, split on every TypeScript line break."""
    lines = (line.strip(_WHITESPACE) for line in _LINE_BREAK.split(description))
    return [line for line in lines if line]


def _resolve(root: Any, pointer: str) -> Any:
    """Follow a JSON pointer (RFC 6901) from ``root``; None (rendered ``unknown``) if it cannot."""
    if pointer == "":
        return root
    here = root
    for token in pointer[1:].split("/"):
        step = token.replace("~1", "/").replace("~0", "~")
        if isinstance(here, dict):
            if step not in here:
                return None
            here = here[step]
        elif isinstance(here, list):
            # An index is decimal digits without a leading zero (or "0" itself).
            if not step.isdigit() or not step.isascii() or (step != "0" and step[0] == "0"):
                return None
            index = int(step)
            if index >= len(here):
                return None
            here = here[index]
        else:
            return None
    return here


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _literal(value: Any) -> str:
    """A JSON value as compact JSON text, numbers written the way Rust's serde_json does."""
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, dict):
        items = (f"{_json(str(k))}:{_literal(v)}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_literal(item) for item in value) + "]"
    return _json(value)


def _float(value: float) -> str:
    if not math.isfinite(value):
        return "null"  # what serde_json writes for a non-finite float
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if not e:
        return text
    # Python writes 1e+21 and 1.5e-07 where serde_json writes 1e21 and 1.5e-7.
    sign = "-" if exponent.startswith("-") else ""
    return f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
