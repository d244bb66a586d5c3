"""Read a data file into records that keep the source's text, each with the place a user would look for it.

No pandas: its type guessing is what turned a JSON `3` into "3.0" and a Parquet int column with a null into
"7.0", and its parse errors name neither file nor row. Here JSON numbers keep the text they were written with
(`Number`), CSV cells are the text between the commas, Parquet values come from pyarrow as Python values (an int
column with a null stays int).

Places are counted the way the natural tool shows them: JSONL and CSV by 1-based line (an editor, `sed -n Np`;
a CSV's header is line 1), a JSON array by 0-based item (`jq '.[N]'`), Parquet and HF datasets by 0-based row
(`table.slice(N)`, `ds[N]`).
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from essaflow.data.errors import DataFileError

SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv", ".parquet")
_CSV_FIELD_LIMIT = 1 << 30  # the csv module's default (128 KiB) would fail a long prompt; data.max_prompt_chars caps


class Number(str):
    """A JSON number as written in the file ("3", "3.0", "1e5"): text for an answer, not text for a prompt."""


@dataclass(frozen=True)
class Record:
    """One record: its values by column, or why it could not be read (``values`` None)."""

    where: str
    values: dict[str, Any] | None
    problem: str | None = None
    default_id: str | None = None
    """The id of a row that has none (a shard's `<file>:<row>`); None: its index in the source."""


@dataclass
class Table:
    """The records of one source and every column seen in them (in first-seen order)."""

    source: str
    records: list[Record] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    parts: list[Table] = field(default_factory=list)
    """The shards a merged table was read from (each checked for the columns on its own); empty for one file."""

    def add(self, where: str, values: dict[str, Any]) -> None:
        for name in values:
            if name not in self._seen:
                self._seen.add(name)
                self.columns.append(name)
        self.records.append(Record(where, values))

    def bad(self, where: str, problem: str) -> None:
        self.records.append(Record(where, None, problem))

    def __post_init__(self) -> None:
        self._seen = set(self.columns)


def read_file(path: Path, source: str | None = None) -> Table:
    """Records of a .jsonl/.ndjson, .json, .csv or .parquet file; ``source`` names it in errors (default the path)."""
    source = source or str(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DataFileError(f"{source}: unsupported data file type {suffix!r}; use {', '.join(SUFFIXES)}")
    data = path.read_bytes()
    if not data or data.isspace():
        raise DataFileError(f"{source}: the file is empty")
    if suffix in (".jsonl", ".ndjson"):
        return read_jsonl(data, source)
    if suffix == ".json":
        return read_json(data, source)
    if suffix == ".csv":
        return read_csv(data, source)
    return read_parquet(data, source)


# ------------------------------------------------------------------------------------------------------- JSON


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (write it as a string)")


#: a value nested past Python's recursion limit (about a thousand arrays or objects deep), which json cannot read
_TOO_DEEP = "a value nested too deeply to read (arrays or objects about a thousand levels deep): flatten it"


def _loads(text: str) -> Any:
    return json.loads(text, parse_int=Number, parse_float=Number, parse_constant=_reject_constant)


def _kind(value: Any) -> str:
    return {list: "array", dict: "object", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, Number) else type(value).__name__
    )


def _utf8_problem(raw: bytes, err: UnicodeDecodeError, line_start: int = 0) -> tuple[int, int, str]:
    """(line, column, message) of a decoding error, counting from ``line_start`` lines."""
    before = raw[: err.start]
    line = line_start + before.count(b"\n") + 1
    column = len(before) - (before.rfind(b"\n") + 1) + 1
    return line, column, f"not UTF-8 text (byte 0x{raw[err.start]:02x}); save the file as UTF-8"


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line, column, why = _utf8_problem(raw, e)
        raise DataFileError(f"{source}: line {line}, column {column}: {why}") from None


def read_jsonl(raw: bytes, source: str) -> Table:
    """One JSON object per line; a bad line (not UTF-8, not JSON, not an object) is a bad record, the rest stand."""
    table = Table(source)
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue  # blank lines (a trailing newline) are no records
        where = f"line {n}"
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            _, column, why = _utf8_problem(line, e)
            table.bad(f"{where}, column {column}", why)
            continue
        try:
            obj = _loads(text)
        except json.JSONDecodeError as e:
            table.bad(f"{where}, column {e.colno}", f"not valid JSON ({e.msg})")
            continue
        except ValueError as e:
            table.bad(where, f"not valid JSON ({e})")
            continue
        except RecursionError:
            table.bad(where, _TOO_DEEP)
            continue
        if not isinstance(obj, dict):
            table.bad(where, f"a JSON {_kind(obj)}, not an object with one field per column")
            continue
        table.add(where, obj)
    return table


def read_json(raw: bytes, source: str) -> Table:
    """An array of objects (records), or an object of columns ({"col": [..]} or pandas' {"col": {"0": ..}})."""
    text = _decode(raw, source)
    try:
        top = _loads(text)
    except json.JSONDecodeError as e:
        hint = "; one JSON object per line? name the file .jsonl" if e.msg == "Extra data" else ""
        raise DataFileError(f"{source}: line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}){hint}") from None
    except ValueError as e:
        raise DataFileError(f"{source}: not valid JSON ({e})") from None
    except RecursionError:
        raise DataFileError(f"{source}: {_TOO_DEEP}") from None
    table = Table(source)
    if isinstance(top, list):
        for i, item in enumerate(top):
            if isinstance(item, dict):
                table.add(f"item {i}", item)
            else:
                table.bad(f"item {i}", f"a JSON {_kind(item)}, not an object with one field per column")
        return table
    if isinstance(top, dict) and top and all(isinstance(v, list | dict) for v in top.values()):
        return _columns_to_records(top, table)
    raise DataFileError(
        f"{source}: line 1, column 1: the top level is a JSON {_kind(top)}; expected an array of objects "
        '(one per problem) or an object of columns ({"question": [...], "answer": [...]})'
    )


def _columns_to_records(top: dict[str, Any], table: Table) -> Table:
    keys: list[str] = []
    for col in top.values():  # row keys: list positions or pandas' index labels, in first-seen order
        for k in range(len(col)) if isinstance(col, list) else col:
            if k not in keys:
                keys.append(k)
    table.columns.extend(top)
    table._seen.update(top)
    for i, k in enumerate(keys):
        values = {}
        for name, col in top.items():
            if isinstance(col, list):
                if k < len(col):
                    values[name] = col[k]
            elif k in col:
                values[name] = col[k]
        table.records.append(Record(f"row {k}" if isinstance(k, str) else f"item {i}", values))
    return table


# -------------------------------------------------------------------------------------------------------- CSV


def read_csv(raw: bytes, source: str) -> Table:
    """A header line naming the columns, then one record per line (quoted cells may span lines).

    Cells are the text as written; an empty cell is a missing value. A record with more or fewer cells than the
    header is a bad record (droppable), not a reason to misalign every column after it.
    """
    text = _decode(raw, source)
    csv.field_size_limit(max(csv.field_size_limit(), _CSV_FIELD_LIMIT))
    reader = csv.reader(io.StringIO(text, newline=""))
    table = Table(source)
    header: list[str] | None = None
    try:
        start = 1
        for cells in reader:
            where = f"line {start}"
            start = reader.line_num + 1
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                dupes = sorted({c for c in header if header.count(c) > 1})
                if dupes:
                    raise DataFileError(f"{source}: {where}: the header names column {dupes[0]!r} twice")
                table.columns.extend(header)
                table._seen.update(header)
                continue
            if len(cells) != len(header):
                extra = len(cells) > len(header)
                column = len(header) + 1 if extra else len(cells) + 1
                table.bad(
                    f"{where}, column {column}",
                    f"{len(cells)} cell{'s' * (len(cells) != 1)} where the header (line 1) names {len(header)} columns"
                    + ("" if extra else f" (no {header[len(cells)]!r})"),
                )
                continue
            table.records.append(Record(where, dict(zip(header, cells))))
    except csv.Error as e:
        raise DataFileError(f"{source}: line {reader.line_num}: not readable as CSV ({e})") from None
    if header is None:
        raise DataFileError(f"{source}: the file is empty (no header line)")
    return table


# ---------------------------------------------------------------------------------------------------- Parquet


def read_parquet(raw: bytes, source: str) -> Table:
    """Rows of a Parquet file as Python values (pyarrow: int columns with nulls stay int, nulls are None)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        arrow = pq.read_table(pa.BufferReader(raw))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise DataFileError(f"{source}: not a readable Parquet file ({e})") from None
    return rows_table(source, arrow.column_names, arrow.to_pylist())


def rows_table(source: str, columns: list[str], rows: Any) -> Table:
    """A Table over already-typed rows (Parquet, a Hugging Face dataset), placed by 0-based row."""
    table = Table(source, columns=list(columns))
    for i, row in enumerate(rows):
        table.records.append(Record(f"row {i}", dict(row)))
    return table
