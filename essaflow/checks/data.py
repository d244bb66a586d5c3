"""Does the data a config names read, and split as the run would split it? Checked offline before anything runs.

A data file that is missing or malformed, a column the file lacks, a field whose rows hold values of different
kinds, splits that would hold nothing out or leave nothing to train on all fail here, with the field named,
instead of minutes into a run; copies of a prompt with different answers get a warning (or, dropped, their count).
Hub and S3 data are checked for their spelling only (nothing is downloaded), and the notes say so.
"""

from __future__ import annotations

import os
from pathlib import Path

from essaflow.checks.findings import Findings, s3_spelling
from essaflow.data import DataError, Problem, read_problems, split_problems
from essaflow.data.config import DataConfig, HeldOutSourceConfig
from essaflow.data.filters import KEPT_CONFLICTS, conflicting_groups, describe_conflicts, drop_conflicting_duplicates
from essaflow.storage.hub import is_hub_id


def check_data_rows(
    data: DataConfig, held_out: HeldOutSourceConfig | None = None
) -> tuple[Findings, list[Problem] | None]:
    """The data a config names (and eval.data), read in full as the run's first task reads them, and the splits
    the run would make: the report, and the training problems read (None: not read here, a hub or S3 source, or
    unreadable). What check-config checks of the data, and `essaflow run` before Prefect starts."""
    report = Findings()
    training = _check_data(data, report)
    held = _check_data(data.held_out(held_out), report, "eval.data.path") if held_out is not None else None
    if training is not None and (held_out is None or held is not None):
        _check_splits(data, training, held, report)
    return report, training


def check_data_path(data: DataConfig) -> list[str]:
    """A local data.path that names nothing to read (missing, a link to nothing, a symlink loop, a device or pipe),
    found by a stat and not a read: what `essaflow run` checks before it starts the flow. Globs and other sources
    are left to the run."""
    from essaflow.data.shards import is_glob, missing_path

    if data.source != "file" or not data.path or is_glob(data.path):
        return []
    expanded = os.path.expanduser(data.path)
    readable = os.path.isfile(expanded) or os.path.isdir(expanded)
    return [] if readable else [f"data.path: {data.path}: {missing_path(data.path, expanded)}"]


def _check_data(data: DataConfig, report: Findings, where: str = "data.path") -> list[Problem] | None:
    """Read a local (or synthetic) source in full, as the run's first task would: its problems after the data
    filters that need no tokenizer (None: not read here, or unreadable, which is a problem)."""
    if data.source == "synthetic":
        report.notes.append(f"data: the built-in synthetic task {data.synthetic.task}")
        try:
            return read_problems(data).problems  # generated in a fraction of a second: its splits are checked too
        except DataError as e:  # knobs that cannot make num_problems distinct problems
            report.problems.append(str(e))
            return None
    if data.source in ("reasoning_gym", "humaneval"):  # generated or shipped by a package: read as the run will
        try:
            problems = read_problems(data).problems
        except DataError as e:
            report.problems.append(str(e))
            return None
        report.notes.append(f"data: {data.source}: {len(problems)} problems")
        return problems
    assert data.path  # the config requires it for every other source
    if data.source == "s3":
        s3_spelling(data.path, where, report)
        return None
    local = Path(data.path).expanduser()
    if data.source == "hf" and not local.exists():
        if is_hub_id(data.path):
            report.notes.append(f"{where}: hub dataset {data.path} (spelling checked; not downloaded)")
        else:
            report.problems.append(f"{where}: {data.path!r} is neither a local path nor a hub dataset id")
        return None
    try:
        loaded = read_problems(data)
    except DataError as e:
        report.problems.append(f"{where}: {e}")
        return None
    dropped = f", {len(loaded.dropped)} malformed row(s) dropped" if loaded.dropped else ""
    report.notes.append(f"{where}: {data.path}: {len(loaded.problems)} problems{dropped}")
    mixed = mixed_field_types(loaded.problems)
    if mixed:
        report.problems.extend(f"{where}: {data.path}: {m}" for m in mixed)
        return None
    return _conflicts(data, loaded.problems, report, where) if where == "data.path" else loaded.problems


def _kind(value: object) -> str | None:
    """A field value's JSON kind (int and float are both a number); None for null."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "text", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def mixed_field_types(problems: list[Problem]) -> list[str]:
    """One line per task field whose rows hold values of different kinds (text in some, a number in others; nulls
    aside), every row read: a reward tried on the first rows meets the other kind only in the run. Each kind is
    named with how many rows hold it and the first of them (row as counted among the problems read, and its id)."""
    kinds: dict[str, dict[str, list]] = {}
    for i, p in enumerate(problems):
        for name, value in p.fields.items():
            kind = _kind(value)
            if kind is not None:
                seen = kinds.setdefault(name, {}).setdefault(kind, [0, i, p.id])
                seen[0] += 1
    out = []
    for name, by_kind in kinds.items():
        if len(by_kind) > 1:
            shown = " and ".join(f"{k} in {n} row(s) (first: row {i}, id {pid!r})" for k, (n, i, pid) in
                                 sorted(by_kind.items(), key=lambda kv: kv[1][1]))  # fmt: skip
            out.append(f"field {name!r} is {shown}: give it one type in every row (a reward reading it expects one)")
    return out


def _conflicts(data: DataConfig, problems: list[Problem], report: Findings, where: str) -> list[Problem] | None:
    """Copies of a prompt with different answers: a warning when kept, the count left when dropped (what the run's
    data filter does; essaflow.data.filters)."""
    groups = conflicting_groups(problems)
    if not groups:
        return problems
    if data.conflicting_duplicates == "keep":
        report.notes.append(f"warning: {where}: {data.path}: {describe_conflicts(groups)}: {KEPT_CONFLICTS}")
        return problems
    kept, n = drop_conflicting_duplicates(problems)
    report.notes.append(f"{where}: {data.path}: {n} problem(s) dropped by data.conflicting_duplicates=drop, "
                        f"{len(kept)} left")  # fmt: skip
    if not kept:
        report.problems.append(f"{where}: {data.path}: no problems left after data.conflicting_duplicates=drop")
        return None
    return kept


def _check_splits(data: DataConfig, problems: list[Problem], held: list[Problem] | None, report: Findings) -> None:
    """The splits the run would make (essaflow.data.splits): no training data or nothing held out is a problem now,
    not after the run has started. data.max_prompt_tokens needs the tokenizer: applied at run time only."""
    try:
        splits = split_problems(problems, data.eval_size, data.sft_fraction, data.held_out_fraction(), held)
    except DataError as e:
        report.problems.append(f"data: {e}")
        return
    unused = f", {splits.held_out_unused} held out past data.eval_size" if splits.held_out_unused else ""
    later = " (before data.max_prompt_tokens, applied at run time)" if data.max_prompt_tokens else ""
    report.notes.append(
        f"data: splits sft {len(splits.sft)}, train {len(splits.train)}, eval {len(splits.eval)}{unused}{later}"
    )
    if held is None and len(splits.eval) < data.eval_size:  # a cap not reached: said, so 13 is not read as 400
        report.notes.append(
            f"note: data.eval_size={data.eval_size} is a cap: {len(splits.eval)} of {len(problems)} problems are held "
            f"out (data.eval_fraction={data.eval_fraction} by problem key); raise data.eval_fraction to hold out more"
        )
