"""MkDocs hook: the reference pages are generated from the code at build time, so they cannot drift.

A page holds a marker line, ``<!-- generated: NAME -->``, that this hook replaces with the generated
Markdown: ``config`` (every key of the pydantic config models: type, default, description), ``cli``
(every command's argparse help), ``columns`` (the manifest tables' columns from the typed rows),
``paths`` (the path-valued keys and how each is checked) or ``include:FILE`` (a file of the repository,
such as ``deployments/README.md``, with its headings moved down one level) or ``results:FILE`` (a
benchmark's committed JSON figures as tables, with the command, the machine and the date).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([\w:./-]+) -->$", re.MULTILINE)


# -- configuration -----------------------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    """A reader's spelling of a field's type: ``float | None``, ``'a' | 'b'``, ``tuple[float, float]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "None"
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (tuple, dict, list):
        inner = ", ".join("..." if a is Ellipsis else _type_name(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
        return "see below" if len(json.dumps(value)) > 60 else json.dumps(value)
    try:
        return json.dumps(value, default=str)
    except TypeError:
        return str(value)


def _comments(model: type[BaseModel]) -> dict[str, str]:
    """Trailing ``# comments`` on field lines of the model's source: the description where a field has none."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    found = {}
    for match in re.finditer(r"^    (\w+): [^\n]*?#\s*(.+)$", source, re.MULTILINE):
        found.setdefault(match.group(1), match.group(2).strip())
    return found


def _bounds(field: Any) -> str:
    """A field's numeric bounds (pydantic's ge/gt/le/lt), e.g. ``>= 64, <= 8192``."""
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    found = [f"{sign} {getattr(m, name)}" for m in field.metadata for name, sign in signs.items()
             if getattr(m, name, None) is not None]
    return ", ".join(found)


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def _tag(model: type[BaseModel]) -> str:
    for name in ("type", "backend"):
        field = model.model_fields.get(name)
        if field is not None and typing.get_origin(field.annotation) is Literal:
            return str(typing.get_args(field.annotation)[0])
    return model.__name__


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def config_sections(model: type[BaseModel], key: str = "") -> list[tuple[str, type[BaseModel], list[tuple]]]:
    """The config tree as sections: (dotted key, model, [(field key, type, default, description)]).

    Args:
        model: the model to walk.
        key: its dotted key ("" for the root, ``gallery.sources[coco]`` for a union member).

    Returns:
        One entry per model, depth first; a field of several models (a union) gives one section per member.
    """
    rows, nested = [], []
    comments = _comments(model)
    for name, field in model.model_fields.items():
        dotted = f"{key}.{name}" if key else name
        description = field.description or comments.get(name, "")
        if bounds := _bounds(field):
            description = f"{description} ({bounds})" if description else f"({bounds})"
        members = _models(field.annotation)
        rows.append((dotted, _type_name(field.annotation), _default(field), description))
        for member in members:
            sub = f"{dotted}[{_tag(member)}]" if len(members) > 1 else dotted
            nested += config_sections(member, sub)
    return [(key, model, rows), *nested]


def config_reference() -> str:
    """Every key of the config models as Markdown tables, one per section."""
    from synrail.config import BuildConfig

    parts = []
    for key, model, rows in config_sections(BuildConfig):
        doc = " ".join((inspect.getdoc(model) or "").split())
        parts.append(f"### `{key or '(top level)'}`\n\n{doc}\n")
        parts.append("| key | type | default | description |\n|---|---|---|---|")
        parts += [f"| `{k}` | `{_cell(t)}` | `{_cell(d)}` | {_cell(text)} |" for k, t, d, text in rows]
        parts.append("")
    return "\n".join(parts)


# -- the other generated pages -----------------------------------------------------------------------------


def cli_reference() -> str:
    """The ``synrail`` parser's help, command by command."""
    import argparse

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: a fixed width keeps the page stable
    from flows.cli import _parser

    parser = _parser()
    parts = ["## `synrail`\n", "```text", parser.format_help().rstrip(), "```\n"]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                parts += [f"## `synrail {name}`\n", "```text", sub.format_help().rstrip(), "```\n"]
    return "\n".join(parts)


def columns_reference() -> str:
    """The manifest tables' columns, from the typed rows they are written from."""
    from synrail.records import (
        ClipAnnotationRow,
        ClipImageRow,
        ClipRefusal,
        GalleryRecord,
        ImageRow,
        ManifestAnnotationRow,
    )

    tables = [("manifest/images.parquet", ImageRow), ("manifest/annotations.parquet", ManifestAnnotationRow),
              ("manifest/gallery.parquet", GalleryRecord), ("manifest/clip_frames.parquet", ClipImageRow),
              ("manifest/clip_annotations.parquet", ClipAnnotationRow),
              ("manifest/refused_clips.parquet", ClipRefusal)]
    parts = []
    for name, row in tables:
        comments = {k: v for base in reversed(row.__mro__) if isinstance(base, type) and issubclass(base, BaseModel)
                    for k, v in _comments(base).items()}
        doc = " ".join((inspect.getdoc(row) or "").split())
        parts += [f"### `{name}`\n", f"{doc} (`synrail.records.{row.__name__}`)\n",
                  "| column | type | description |", "|---|---|---|"]
        parts += [f"| `{k}` | `{_cell(_type_name(f.annotation))}` | {_cell(f.description or comments.get(k, ''))} |"
                  for k, f in row.model_fields.items()]
        parts.append("")
    return "\n".join(parts)


def paths_reference() -> str:
    """The path-valued keys and what ``synrail build`` checks there before any work."""
    from synrail.path_check import PATH_KEYS

    rows = ["| key | must be | what it names |", "|---|---|---|"]
    for key, spec in PATH_KEYS.items():
        kind = {"file": "a readable file", "folder": "a folder (or s3:// prefix)",
                "output": "a folder, made when missing"}[spec.kind]
        words = f" (or {', '.join(spec.words)})" if spec.words else ""
        rows.append(f"| `{key}` | {kind}{words} | {_cell(spec.meaning)} |")
    return "\n".join(rows)


def include(relative: str) -> str:
    """A repository file's Markdown, its headings one level down and its relative links made plain text."""
    text = (ROOT / relative).read_text()
    text = re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.MULTILINE)
    return re.sub(r"\[([^\]]+)\]\((?!https?://)[^)]+\)", r"\1", text)


def _figure(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if value != value else f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def results(relative: str) -> str:
    """A benchmark's JSON figures (``{"command", "date", "machine", "runs": {run: {group: {figure: value}}}}``)
    as one table per run, groups as rows; entries that are not flat figures (per-frame lists) are left out."""
    figures = json.loads((ROOT / relative).read_text())
    out = [f"`{figures['command']}` on {figures.get('machine', 'an unnamed machine')}, {figures['date']} "
           f"(`{relative}`)."]
    for run, groups in figures["runs"].items():
        rows = {group: values for group, values in groups.items()
                if isinstance(values, dict) and all(not isinstance(v, dict) for v in values.values())}
        columns = list(dict.fromkeys(key for values in rows.values() for key in values))
        out += ["", f"**{run}**", "", "| group | " + " | ".join(columns) + " |",
                "|---|" + "---|" * len(columns)]
        out += [f"| {group} | " + " | ".join(_figure(values.get(c, "")) for c in columns) + " |"
                for group, values in rows.items()]
    return "\n".join(out)


def generate(name: str) -> str:
    """The Markdown a marker names.

    Args:
        name: ``config``, ``cli``, ``columns``, ``paths``, ``include:FILE`` or ``results:FILE``.

    Returns:
        The generated Markdown.
    """
    if name.startswith("include:"):
        return include(name.split(":", 1)[1])
    if name.startswith("results:"):
        return results(name.split(":", 1)[1])
    return {"config": config_reference, "cli": cli_reference, "columns": columns_reference,
            "paths": paths_reference}[name]()


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: replace each marker with what it names."""
    return MARKER.sub(lambda m: generate(m.group(1)), markdown)
