"""Records -> Problems: the column mapping, the answer adapters, and one message per malformed row.

A row's message names where it is (line/item/row, from essaflow.data.readers) and the source column at fault:
`line 4, column 'answer': answer is a list, not text or a number`. A column missing from the whole source is one
error listing the columns present, not a copy per row.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from essaflow.data.answers import after_hashes, last_boxed
from essaflow.data.config import MAPPABLE, DataConfig
from essaflow.data.errors import BadRowsError, DataFileError
from essaflow.data.readers import Number, Table
from essaflow.data.schema import Problem

ADAPTER_COLUMNS = {
    # GSM8K: question / answer (worked solution ending in '#### 42')
    "gsm8k": {"prompt": "question", "answer": "answer"},
    # MATH / MATH500: problem / solution (final answer in the last \boxed{})
    "math": {"prompt": "problem", "answer": "solution"},
    "plain": {},
}
REQUIRED = ("prompt", "answer")


class NotScalar(ValueError):
    """A cell holding a list, an object or bytes: no text to compare an answer with."""


def cell_text(value: Any) -> str | None:
    """A cell as the source wrote it: None when missing; numbers as their text (JSON keeps what was written: 3 ->
    "3", 3.0 -> "3.0"; typed Parquet/HF values: int 7 -> "7", float 7.0 -> "7", 2.5 -> "2.5"); booleans as JSON
    writes them. Lists, objects and bytes raise NotScalar."""
    if value is None:
        return None
    if isinstance(value, str):
        return str(value)  # a plain str, also for a JSON Number (its text)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal):
        return str(value)
    if isinstance(value, float):
        if value != value:  # NaN is how pandas-written files spell null
            return None
        # A typed float has no source text. One holding an integer is nearly always an int column that pandas
        # turned into float64 to hold a null, so 7.0 reads "7"; other floats read as their shortest repr ("2.5").
        return str(int(value)) if value.is_integer() else repr(value)
    kind = {list: "a list", tuple: "a list", dict: "an object", bytes: "bytes", bytearray: "bytes"}
    raise NotScalar(f"{kind.get(type(value), type(value).__name__)}, not text or a number")


def column_map(cfg: DataConfig) -> dict[str, str]:
    """Our field -> the source's column: identity, then the adapter's names, then data.columns."""
    identity = {"id": "id", "prompt": "prompt", "answer": "answer", "solution": "solution"}
    return {**identity, **ADAPTER_COLUMNS[cfg.adapter], **cfg.columns}


def field_map(cfg: DataConfig) -> dict[str, str]:
    """Problem field -> the source's column, for the fields data.columns names (the others keep their column's
    name)."""
    return {name: col for name, col in cfg.columns.items() if name not in MAPPABLE}


def check_columns(table: Table, cfg: DataConfig) -> None:
    """One error for a required column (or a field data.columns names) absent from every record, listing the
    columns the source has."""
    mapping = {**column_map(cfg), **field_map(cfg)}
    for ours in (*REQUIRED, *field_map(cfg)):
        theirs = mapping[ours]
        if theirs not in table.columns:
            how = (
                f"data.columns.{ours}"
                if ours in cfg.columns
                else f"data.adapter={cfg.adapter}"
                if ours in ADAPTER_COLUMNS[cfg.adapter]
                else f"the default; map yours with data.columns.{ours}"
            )
            raise DataFileError(
                f"{table.source}: no column {theirs!r} (the {ours}, from {how}); columns present: {table.columns}"
            )


def _adapt(cfg: DataConfig, answer: str) -> tuple[str | None, str]:
    """(final answer or None, why None) under data.adapter."""
    if cfg.adapter == "gsm8k":
        return after_hashes(answer), "no '#### <answer>' line (data.adapter=gsm8k)"
    if cfg.adapter == "math":
        return last_boxed(answer), "no \\boxed{...} answer (data.adapter=math)"
    return answer.strip() or None, "answer is empty"


def _problem(record_values: dict[str, Any], default_id: str, cfg: DataConfig) -> dict[str, Any] | tuple[str, str]:
    """The Problem fields of one record, or (column, why) when it is malformed."""
    mapping = column_map(cfg)
    col = mapping["prompt"]
    prompt = record_values.get(col)
    if prompt is None or (isinstance(prompt, float) and prompt != prompt):
        return col, "prompt is missing"
    if not isinstance(prompt, str) or isinstance(prompt, Number):
        return col, f"prompt is {_a(prompt)}, not text"
    if not prompt.strip():
        return col, "prompt is empty"
    prompt = cfg.prompt_template.replace("{prompt}", prompt)
    if cfg.max_prompt_chars is not None and len(prompt) > cfg.max_prompt_chars:
        return col, f"prompt is {len(prompt)} characters, over data.max_prompt_chars={cfg.max_prompt_chars}"

    col = mapping["answer"]
    try:
        raw = cell_text(record_values.get(col))
    except NotScalar as e:
        return col, f"answer is {e}"
    if raw is None or not raw.strip():
        return col, "answer is missing"
    answer, why = _adapt(cfg, raw)
    if answer is None:
        return col, why

    col = mapping["id"]
    try:
        rid = cell_text(record_values.get(col))
    except NotScalar as e:
        return col, f"id is {e}"
    fields = {"id": rid if rid and rid.strip() else default_id, "prompt": prompt, "answer": answer}
    if "solution" in Problem.model_fields:  # where the schema has one (sft.target=solution trains on it)
        # a 'solution' column (or data.columns.solution), else the adapter's full answer text: GSM8K's worked
        # answer, MATH's solution; the reward still judges the final answer
        col = mapping["solution"]
        try:
            text = cell_text(record_values[col]) if col in record_values else None
        except NotScalar as e:
            return col, f"solution is {e}"
        text = text if text is not None or cfg.adapter == "plain" else raw
        fields["solution"] = text.strip() if text and text.strip() else None
    task_fields = _task_fields(record_values, cfg)
    if isinstance(task_fields, tuple):
        return task_fields
    fields["fields"] = task_fields
    return fields


def _task_fields(record_values: dict[str, Any], cfg: DataConfig) -> dict[str, Any] | tuple[str, str]:
    """The record's columns beyond ours, typed as read, under their field names; or (column, why)."""
    mapping = column_map(cfg)
    consumed = {mapping[ours] for ours in MAPPABLE}
    named = field_map(cfg)
    by_column = {col: name for name, col in named.items()}
    out: dict[str, Any] = {}
    for col, value in record_values.items():
        if col in consumed and col not in by_column:
            continue
        try:
            out[by_column.get(col, col)] = typed_value(value)
        except NotScalar as e:
            return col, f"field {by_column.get(col, col)!r} is {e}"
    return out


#: lists and objects a field may nest: deeper is no task's data, and each level costs Python frames (a field 1,000
#: deep was a RecursionError; the limit is the same in check-config and in a run's deeper stack)
MAX_NESTING = 100


def typed_value(value: Any, depth: int = 0) -> Any:
    """A cell as a JSON value: a file's numbers as int or float (JSON keeps 3 and 3.0 apart), lists and objects
    typed the same way inside, NaN (pandas' null) as None. Bytes and other types, and lists or objects nested past
    MAX_NESTING, raise NotScalar."""
    if depth > MAX_NESTING:
        raise NotScalar(f"nested more than {MAX_NESTING} lists or objects deep: flatten it")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Number):  # a JSON number's text
        return int(value) if value.lstrip("-").isdigit() else float(value)
    if isinstance(value, str | int):
        return value
    if isinstance(value, float | Decimal):
        value = float(value)
        return None if value != value else value
    if isinstance(value, list | tuple):
        return [typed_value(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): typed_value(v, depth + 1) for k, v in value.items()}
    raise NotScalar(f"{type(value).__name__}, not a JSON value (text, number, boolean, list or object)")


def _a(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Number | int | float | Decimal):
        return f"the number {value}"
    try:
        cell_text(value)
    except NotScalar as e:
        return str(e).split(",")[0]
    return f"a {type(value).__name__}"


def table_problems(table: Table, cfg: DataConfig) -> tuple[list[Problem], list[tuple[int, str]]]:
    """Validate every record; returns (problems, dropped).

    With data.on_bad_row=error any malformed record raises one BadRowsError listing them all; with drop they are
    returned for the caller to count. An empty source, or one where every record is malformed, is an error either way.
    """
    if not table.records:
        raise DataFileError(f"{table.source}: no rows (the source holds no records)")
    for part in table.parts or [table]:  # each shard names its own missing column
        if any(r.values is not None for r in part.records):
            check_columns(part, cfg)
    problems: list[Problem] = []
    bad: list[tuple[int, str]] = []
    seen: dict[str, str] = {}
    id_col = column_map(cfg)["id"]
    for i, record in enumerate(table.records):
        if record.values is None:
            bad.append((i, f"{record.where}: {record.problem}"))
            continue
        fields = _problem(record.values, record.default_id or str(i), cfg)
        if isinstance(fields, tuple):
            bad.append((i, f"{record.where}, column {fields[0]!r}: {fields[1]}"))
            continue
        if fields["id"] in seen:
            first = seen[fields["id"]]
            bad.append((i, f"{record.where}, column {id_col!r}: duplicate id {fields['id']!r} (first at {first})"))
            continue
        seen[fields["id"]] = record.where
        problems.append(Problem(**fields))
    if bad and (cfg.on_bad_row == "error" or not problems):
        raise BadRowsError(table.source, bad, all_dropped=cfg.on_bad_row == "drop")
    return problems, bad
