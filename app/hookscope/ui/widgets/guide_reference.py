"""The guide's generated pages as the window's guide shows them, made when a page is opened from the objects
themselves, as the site's build makes them: the command-line reference from the very parsers ``hookscope`` parses
its arguments with, the Python API reference from the public names' signatures and docstrings.

The API's names come from the page (``::: hookscope.capture``, the API page's directives) and from the package
(``hookscope.__all__``). The command-line reference's generator is handed in by what starts the window (``provide``:
the command line, or ``hookscope.Viewer``): the window sits under the command line (the layers of pyproject.toml:
cli -> ui -> core) and never imports it, yet shows what it prints."""

from __future__ import annotations

import functools
import importlib
import inspect
import pprint
import re
from collections.abc import Callable
from typing import Any

from hookscope.core.teaching.guide import CLI_REFERENCE, CLI_STAND_IN, Members, plain_roles

PACKAGE = "hookscope"
API_REFERENCE = "reference/api.md"
SIGNATURE_WIDTH = 88  # longer signatures go one parameter a line (the page has no sideways scrolling for them)
VALUE_WIDTH = 300  # a constant's value longer than this is left to help()


_generators: dict[str, Callable[[], str]] = {}


def provide(page: str, make: Callable[[], str]) -> None:
    """The generator of a generated ``page`` (``reference/cli.md``), handed in by what starts the window."""
    _generators[page] = make


def cli_reference() -> str:
    """The command-line reference page: the same Markdown the site's build writes (``docs/hooks/guide_files.py``)."""
    make = _generators.get(CLI_REFERENCE)
    if make is None:
        return f"{CLI_STAND_IN}\nThe window was started without the command line, which makes this page.\n"
    try:
        return str(make())
    except Exception as error:  # noqa: BLE001 (the page says why, and how to read the same text: never a traceback)
        return f"{CLI_STAND_IN}\nThe reference could not be made here ({type(error).__name__}: {error}).\n"


GENERATED: dict[str, Callable[[], str]] = {CLI_REFERENCE: cli_reference}


def _lookup(name: str) -> Any:
    module, _, attribute = name.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def signature(name: str, value: Any) -> str:
    """``name(parameters) -> result`` as ``inspect.signature`` writes it (a method without its ``self``, as the
    site writes it), one parameter a line when long; the bare name for what takes no call."""
    try:
        found = inspect.signature(value)
    except (TypeError, ValueError):
        return name
    parameters = list(found.parameters.values())
    if parameters and parameters[0].name in ("self", "cls") and "." in name.removeprefix(f"{PACKAGE}."):
        found = found.replace(parameters=parameters[1:])
    text = f"{name}{found}"
    if len(text) <= SIGNATURE_WIDTH or not found.parameters:
        return text
    empty = inspect.Signature.empty
    result = "" if found.return_annotation is empty else f" -> {inspect.formatannotation(found.return_annotation)}"
    lines = [f"    {parameter}," for parameter in _spelled(found)]
    return "\n".join([f"{name}(", *lines, f"){result}"])


def _spelled(found: inspect.Signature) -> list[str]:
    """The parameters as ``str(signature)`` spells them, with its ``/`` and ``*`` markers."""
    kinds = inspect.Parameter
    parts: list[str] = []
    previous = None
    for parameter in found.parameters.values():
        if previous == kinds.POSITIONAL_ONLY and parameter.kind != kinds.POSITIONAL_ONLY:
            parts.append("/")
        if parameter.kind == kinds.KEYWORD_ONLY and previous not in (kinds.KEYWORD_ONLY, kinds.VAR_POSITIONAL):
            parts.append("*")
        parts.append(str(parameter))
        previous = parameter.kind
    if previous == kinds.POSITIONAL_ONLY:
        parts.append("/")
    return parts


PROPERTIES = (property, functools.cached_property)
MISSING = object()  # a field a class annotates but gives no value


def _entry(heading: str, title: str, value: Any, annotation: Any = None) -> list[str]:
    """One name: its heading, its signature (or value) as code, its docstring as the Markdown it is written in."""
    out = [f"{heading} `{title}`", "", "```"]
    if isinstance(value, PROPERTIES):
        out.append(f"{title}  (property)")
    elif callable(value):
        out.append(signature(title, value))
    elif value is MISSING:
        out.append(f"{title}: {annotation}" if annotation is not None else title)
    else:
        shown = pprint.pformat(
            value, width=SIGNATURE_WIDTH - len(title) - 3, sort_dicts=False
        )  # long ones a line an item
        out.append(f"{title} = {shown}" if len(shown) <= VALUE_WIDTH else title)
    out.append("```")
    doc = inspect.getdoc(value) if callable(value) or isinstance(value, PROPERTIES) else None
    if doc:
        out += ["", plain_roles(doc)]
    return [*out, ""]


def _members_of(value: type, members: Members) -> list[tuple[str, Any, Any]]:
    """A class's members to show, with their annotations: those named (``members: [...]``), else every public one it
    defines (its own, in the order it defines them, the fields of a dataclass too), as the site shows them."""
    annotations = getattr(value, "__annotations__", {})
    names = members
    if names is None:
        names = tuple(dict.fromkeys(n for n in [*vars(value), *annotations] if not n.startswith("_")))
    found = []
    for name in names:
        member = inspect.getattr_static(value, name, MISSING)
        if isinstance(member, (staticmethod, classmethod)):
            member = getattr(value, name)
        found.append((name, member, annotations.get(name)))
    return found


def describe(name: str, members: Members = None) -> str:
    """A name a page documents (``::: hookscope.Capture``) as the API reference shows it: signature and docstring,
    then those of its members. Looked up when the page is opened (``hookscope`` loads a public name's module on its
    first use). A name that cannot load gives an empty text: the page says to ask ``help()``."""
    try:
        value = _lookup(name)
    except Exception:  # noqa: BLE001 (a name that cannot load costs its entry, never the page)
        return ""
    out = _entry("###", name, value)
    if inspect.isclass(value) and members != ():
        short = name.rpartition(".")[2]
        for member, found, annotation in _members_of(value, members):
            out += _entry("####", f"{short}.{member}", found, annotation)
    return "\n".join(out) + "\n"


def public_names() -> list[str]:
    """``hookscope.NAME`` for every name of ``hookscope.__all__``."""
    return [f"{PACKAGE}.{name}" for name in importlib.import_module(PACKAGE).__all__]


def complete_api_page(text: str) -> str:
    """The API page with every public name of ``hookscope`` the page does not describe added at its end, so that the
    window's reference misses none even when the page is behind the package."""
    described = set(re.findall(r"^### `([\w.]+)`$", text, flags=re.MULTILINE))
    missing = [name for name in public_names() if name not in described]
    if not missing:
        return text
    return "\n".join([text.rstrip(), "", "## Other public names", "", *(describe(name) for name in missing)])
