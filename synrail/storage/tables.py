"""Parquet tables in the store, and Arrow schemas derived from typed rows.

A row model's schema comes from its fields (``int`` -> int64, ``float`` -> float64, ``str`` -> string,
``bool`` -> bool; ``X | None`` nullable), so a column is declared once, where the row is.
"""

from __future__ import annotations

import functools
import io
import types
import typing
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel

from synrail.storage.store import Store

_ARROW_TYPES = {int: pa.int64(), float: pa.float64(), str: pa.string(), bool: pa.bool_()}


def _arrow_type(annotation: Any) -> pa.DataType:
    """Arrow type of a field annotation (``X | None`` gives X's type: every column is nullable)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _ARROW_TYPES[inner]
    return _ARROW_TYPES[annotation]


@functools.cache
def arrow_schema(row_model: type[BaseModel]) -> pa.Schema:
    """The Arrow schema of ``row_model``'s fields, in declaration order.

    Args:
        row_model: a pydantic model whose fields are int, float, str, bool or ``X | None`` of those.

    Returns:
        A ``pyarrow.Schema`` with one nullable field per model field.
    """
    return pa.schema([pa.field(name, _arrow_type(field.annotation), nullable=True)
                      for name, field in row_model.model_fields.items()])


def table_bytes(rows: Sequence[dict[str, Any]], schema: pa.Schema | None = None) -> bytes:
    """``rows`` as one Parquet file.

    Args:
        rows: one dict per row.
        schema: the Arrow schema; inferred from the values when None.

    Returns:
        The Parquet file's bytes.
    """
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(list(rows), schema=schema), buffer)
    return buffer.getvalue()


def rows_bytes(rows: Sequence[BaseModel], row_model: type[BaseModel]) -> bytes:
    """Typed ``rows`` as one Parquet file with the schema derived from ``row_model``.

    Args:
        rows: the records.
        row_model: their pydantic model, which gives the schema (also when ``rows`` is empty).

    Returns:
        The Parquet file's bytes.
    """
    return table_bytes([r.model_dump() for r in rows], arrow_schema(row_model))


def read_table(store: Store, rel: str) -> list[dict[str, Any]]:
    """The rows of a Parquet file as dicts.

    Args:
        store: where the file is.
        rel: its path in ``store``.

    Returns:
        One dict per row.
    """
    return pq.read_table(io.BytesIO(store.read_bytes(rel))).to_pylist()


def read_rows(store: Store, rel: str, row_model: type[BaseModel]) -> list[Any]:
    """The rows of a Parquet file as records.

    Args:
        store: where the file is.
        rel: its path in ``store``.
        row_model: the pydantic model each row is validated into.

    Returns:
        One ``row_model`` instance per row.
    """
    return [row_model.model_validate(row) for row in read_table(store, rel)]
