"""Packed columns: how a report file stores its timeline and its op rows (schema_version 2).

A timeline has one entry per allocator event in each of 14 columns; as JSON lists that is about
120 bytes per event, and a million events take seconds to parse. On disk each column is packed
instead (docs/report-format.md, "Packed columns"):

- integers (`seq`, `bytes`, `allocated`, ...): 64-bit little-endian differences from the entry
  before, zlib-compressed, base64 text: `{"int": "eJz..."}`;
- times in seconds (`time_s`, rounded to the nanosecond when recorded): the same, of integer
  nanoseconds: `{"ns": "eJz..."}`;
- anything else (names, actions, iterations with nulls): the distinct values in order of first
  appearance and, packed like integers, each entry's index into them:
  `{"labels": ["alloc", "free"], "codes": "eJz..."}`;
- a column that fits none of these stays a JSON list: `{"values": [...]}`.

Tables of fewer than PACK_MIN entries stay plain lists (they read better, and are no larger).
A packed table is `{"packed": N, "columns": {name: column}}`, N entries per column. The op rows
(a list of objects) pack the same way, one column per key (in the order keys first appear); for
a key some rows lack, `"absent": {key: [row indexes]}` says which.

Unpacking gives the lists back exactly (`unpack(pack(x)) == x`), or numpy arrays (integers and
times) and `Labels` (the rest) for the dashboard, which never needs the lists.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import numpy as np

from memprof.reports.reduce import Labels

_LEVEL = 6
PACK_MIN = 256  # a report packs a table of at least this many entries (fewer stay plain lists)


class PackError(ValueError):
    """A packed column that cannot be read (its message names what is wrong)."""


# --- encoding -------------------------------------------------------------------------------------


def _ints_text(values: np.ndarray) -> str:
    deltas = np.diff(values.astype("<i8", copy=False), prepend=np.int64(0))
    return base64.b64encode(zlib.compress(deltas.tobytes(), _LEVEL)).decode("ascii")


def pack_column(values: list) -> dict[str, Any]:
    """One column (a list of JSON scalars) as its smallest packed form.

    The checks run over the whole column at once (the entries' types as a set, numpy's range
    and finiteness tests, the labels' codes through one dict): a report's columns have tens of
    thousands of entries each, which per-entry Python took most of saving a report for."""
    types = set(map(type, values))
    if types == {int}:  # (bool is a type of its own here: labels)
        try:
            ints = np.array(values, dtype=np.int64)
        except OverflowError:  # past int64: labels
            ints = None
        if ints is not None:
            return {"int": _ints_text(ints)}
    if types == {float}:
        floats = np.array(values, dtype=np.float64)
        if np.isfinite(floats).all() and (np.abs(floats) < 9e9).all():
            ns = np.rint(floats * 1e9).astype(np.int64)
            if (ns / 1e9).tolist() == values:  # exact round trip: nanosecond-rounded times
                return {"ns": _ints_text(ns)}
    # labels keyed by value, or by (type, value) where values of two types compare equal
    # (1, 1.0 and True are three labels)
    typed = len(types & {int, float, bool}) > 1
    keys = list(zip(map(type, values), values, strict=True)) if typed else values
    try:
        lut = {key: code for code, key in enumerate(dict.fromkeys(keys))}  # first appearance
    except TypeError:  # an unhashable entry (a list, an object): keep the JSON list
        return {"values": list(values)}
    labels = [v for _, v in lut] if typed else list(lut)
    codes = np.fromiter(map(lut.__getitem__, keys), dtype=np.int64, count=len(keys))
    return {"labels": labels, "codes": _ints_text(codes)}


def pack_columns(columns: dict[str, list]) -> dict[str, Any]:
    """Equal-length columns as a packed table."""
    n = len(next(iter(columns.values()), []))
    return {"packed": n, "columns": {k: pack_column(v) for k, v in columns.items()}}


def pack_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A list of flat objects (the op rows) as a packed table: one column per key, in the order
    keys first appear; `absent`: for each key some rows lack, the indexes of those rows."""
    keys: dict[str, None] = {}
    for row in rows:
        for k in row:
            keys.setdefault(k, None)
    columns, absent = {}, {}
    for k in keys:
        missing = [i for i, row in enumerate(rows) if k not in row]
        columns[k] = pack_column([row.get(k) for row in rows])
        if missing:
            absent[k] = missing
    table = {"packed": len(rows), "columns": columns}
    if absent:
        table["absent"] = absent
    return table


# --- decoding -------------------------------------------------------------------------------------


def is_packed(value: Any) -> bool:
    return isinstance(value, dict) and "packed" in value


def _ints(text: Any, n: int, where: str) -> np.ndarray:
    if not isinstance(text, str):
        raise PackError(f"{where}: expected base64 text")
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
        if 8 * n > 1100 * len(data) + 64:  # more than zlib can expand to: refuse, allocate nothing
            raise PackError(f"{where}: expected {n} entries, found far fewer")
        inflate = zlib.decompressobj()
        raw = inflate.decompress(data, 8 * n + 1)
    except (ValueError, zlib.error, UnicodeEncodeError) as exc:
        if isinstance(exc, PackError):
            raise
        raise PackError(f"{where}: not base64 of zlib data ({exc})") from None
    if len(raw) != 8 * n or not inflate.eof:
        raise PackError(f"{where}: expected {n} entries, found {len(raw) / 8:g}")
    return np.cumsum(np.frombuffer(raw, dtype="<i8"), dtype=np.int64)


def unpack_column(column: Any, n: int, where: str, *, arrays: bool = False):
    """A packed column back as a list (or, arrays=True, a numpy array or Labels)."""
    if not isinstance(column, dict) or len(column) not in (1, 2):
        raise PackError(f"{where}: expected a packed column ({{'int': ...}}, {{'ns': ...}}, ...)")
    if "int" in column:
        values = _ints(column["int"], n, where)
        return values if arrays else values.tolist()
    if "ns" in column:
        seconds = _ints(column["ns"], n, where) / 1e9
        return seconds if arrays else seconds.tolist()
    if "labels" in column:
        labels = column["labels"]
        if not isinstance(labels, list) or any(isinstance(v, (list, dict)) for v in labels):
            raise PackError(f"{where}.labels: expected a list of values")
        codes = _ints(column.get("codes"), n, where + ".codes")
        if n and (codes.min() < 0 or codes.max() >= len(labels)):
            raise PackError(f"{where}.codes: expected indexes into labels (0 to {len(labels) - 1})")
        if arrays:
            return Labels(codes.astype(np.int32), tuple(labels))
        names = np.empty(len(labels), dtype=object)
        names[:] = labels
        return names[codes].tolist()
    if "values" in column:
        values = column["values"]
        if not isinstance(values, list) or len(values) != n:
            raise PackError(f"{where}.values: expected a list of {n} entries")
        return values
    raise PackError(f"{where}: unknown packing {sorted(column)}")


def unpack_columns(table: Any, where: str, *, arrays: bool = False) -> dict[str, Any]:
    """A packed table back as {name: list} (or arrays, as unpack_column)."""
    n, columns = _table(table, where)
    return {
        k: unpack_column(c, n, f"{where}.columns.{k}", arrays=arrays) for k, c in columns.items()
    }


def unpack_rows(table: Any, where: str, check=None) -> list[dict[str, Any]]:
    """A packed row table back as its list of objects. check(key, column, absent): called per
    column before the rows are made, with the column as arrays or Labels (unpack_column's
    arrays=True) and the row indexes that lack the key."""
    n, columns = _table(table, where)
    absent = table.get("absent") or {}
    if not isinstance(absent, dict):
        raise PackError(f"{where}.absent: expected an object")
    values = {}
    for k, c in columns.items():
        column = unpack_column(c, n, f"{where}.columns.{k}", arrays=True)
        if check is not None:
            check(k, column, absent.get(k) or [])
        if isinstance(column, np.ndarray):
            values[k] = column.tolist()
        elif isinstance(column, Labels):
            values[k] = column.take(slice(None))
        else:
            values[k] = column
    keys = list(values)
    if keys:
        rows = [dict(zip(keys, entry, strict=True)) for entry in zip(*values.values(), strict=True)]
    else:
        rows = [{} for _ in range(n)]
    for k, missing in absent.items():
        if k not in values or not isinstance(missing, list):
            raise PackError(f"{where}.absent.{k}: expected the indexes of rows without {k!r}")
        for i in missing:
            if not (type(i) is int and 0 <= i < n):
                raise PackError(f"{where}.absent.{k}: expected row indexes (0 to {n - 1})")
            rows[i].pop(k, None)
    return rows


def _table(table: Any, where: str) -> tuple[int, dict]:
    if not is_packed(table):
        raise PackError(f"{where}: expected a packed table ({{'packed': N, 'columns': ...}})")
    n, columns = table["packed"], table.get("columns")
    if not (type(n) is int and 0 <= n < 2**40):
        raise PackError(f"{where}.packed: expected the number of entries")
    if not isinstance(columns, dict):
        raise PackError(f"{where}.columns: expected an object")
    return n, columns
