"""Sphinx configuration for the codemode-trio documentation.

Build it with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (the ``docs``
extra installs what it needs). The pages are Markdown (MyST); the API reference is generated
from the docstrings of every name in a module's ``__all__`` by the ``autoall`` directive below,
so a name added to ``__all__`` is documented without editing a page.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import PycodeError
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[1]
# Document this checkout, not whatever copy of the package is installed.
sys.path.insert(0, str(ROOT))

import codemode_trio  # noqa: E402

project = "codemode-trio"
author = "codemode-trio developers"
copyright = "codemode-trio developers"
release = codemode_trio.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.viewcode",
    "sphinxcontrib_trio",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Heading anchors as GitHub makes them, so a link such as protocol/spec.md#42-... works both on
# the site and when the Markdown is read in the repository.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence"]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# The names in __all__ live in private modules; show them where users import them from.
add_module_names = True

html_theme = "alabaster"
html_title = f"codemode-trio {release}"
html_theme_options = {"description": "Trio client, reference host and conformance kit"}


def _kind(value: Any) -> str:
    """The autodoc directive that documents ``value``."""
    if inspect.isclass(value):
        return "exception" if issubclass(value, BaseException) else "class"
    if inspect.isfunction(value) or inspect.isbuiltin(value):
        return "function"
    return "data"


def _attribute_doc(name: str, value: Any) -> tuple[str, list[str]] | None:
    """The module that assigns ``value`` to ``name`` and the ``#:`` comment documenting it.

    A constant or a type alias has no docstring of its own (``__doc__`` is its type's), so its
    documentation is the comment above its assignment, found where it is defined.
    """
    for module_name, module in sorted(sys.modules.items()):
        if not module_name.startswith("codemode_trio") or getattr(module, name, None) is not value:
            continue
        try:
            docs = ModuleAnalyzer.for_module(module_name).find_attr_docs()
        except PycodeError:
            continue
        if ("", name) in docs:
            return module_name, list(docs[("", name)])
    return None


class AutoAll(SphinxDirective):
    """``autoall MODULE``: document every name of ``MODULE.__all__``, grouped by defining module.

    Options: ``:exclude-module: OTHER`` leaves out the names OTHER also exports (they are
    documented under OTHER; a second description would be a duplicate), listing them as links.
    """

    required_arguments = 1
    option_spec = {"exclude-module": lambda text: text.strip()}  # noqa: RUF012

    def run(self) -> list[nodes.Node]:
        """Parse the generated autodoc directives in place of this one."""
        module_name = self.arguments[0]
        module = importlib.import_module(module_name)
        excluded: set[str] = set()
        other = self.options.get("exclude-module")
        if other:
            excluded = set(importlib.import_module(other).__all__)
        groups: dict[str, list[tuple[str, Any]]] = {}
        shared: list[str] = []
        for name in module.__all__:
            if name in excluded:
                shared.append(name)
                continue
            value = getattr(module, name)
            home = getattr(value, "__module__", None) if _kind(value) != "data" else None
            groups.setdefault(home or module_name, []).append((name, value))
        lines: list[str] = []
        for home in sorted(groups):
            lines += [f".. rubric:: From ``{home}``", ""]
            for name, value in groups[home]:
                if _kind(value) != "data":
                    lines += [f".. auto{_kind(value)}:: {module_name}.{name}", ""]
                    continue
                found = _attribute_doc(name, value)
                if found is None:
                    warning = f"{module_name}.{name} has no #: comment"
                    self.reporter.warning(warning, line=self.lineno)
                    continue
                lines += [f".. py:data:: {module_name}.{name}", f"   :value: {value!r}", ""]
                lines += [f"   {line}" if line else "" for line in found[1]] + [""]
        if shared:
            links = ", ".join(f":obj:`{other}.{name}`" for name in sorted(shared))
            lines += [".. rubric:: Also exported here", ""]
            lines += [f"Documented under ``{other}``: {links}.", ""]
        content = StringList(lines, source=f"autoall {module_name}")
        container = nodes.container()
        self.state.nested_parse(content, self.content_offset, container)
        return list(container.children)


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the ``autoall`` directive."""
    app.add_directive("autoall", AutoAll)
    return {"parallel_read_safe": True}
