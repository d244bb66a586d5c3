"""Do a config's inputs exist? The model and the data it names, checked offline before anything runs.

`essaflow check-config` calls this after the config itself validated: a model path that is no checkpoint (no
config.json, no weights, no tokenizer files), a data file that is missing or malformed, a column the file lacks, too
few problems for the eval split all fail here, with the field named, instead of minutes into a run. `essaflow run`
checks the model the same way before it starts the flow. Nothing is downloaded: a hub id or an s3:// URI is
checked for its spelling only, and the report says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from essaflow.config import DataConfig, ModelConfig
from essaflow.config_base import ConfigError
from essaflow.data import DataError, read_problems
from essaflow.data.config import HeldOutSourceConfig
from essaflow.storage.hub import is_hub_id


@dataclass
class InputReport:
    """``problems``: one line each, naming the field; ``notes``: what was checked, and what could not be offline."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_inputs(model: ModelConfig, data: DataConfig, held_out: HeldOutSourceConfig | None = None) -> InputReport:
    """The model and data a config names (and the held-out source, eval.data): each problem names its field."""
    report = InputReport()
    _check_model(model.name_or_path, report)
    _check_chat_template(model, data, report)
    _check_data(data, report)
    if held_out is not None:
        _check_data(data.held_out(held_out), report, "eval.data.path")
    return report


def check_model(model: ModelConfig) -> InputReport:
    """The model a config names, alone (what `essaflow run` checks before the flow starts)."""
    report = InputReport()
    _check_model(model.name_or_path, report)
    return report


def require_model(model: ModelConfig) -> None:
    """ConfigError naming the path and what it lacks unless the model a config names looks loadable (check_model):
    what a run checks first, wherever it was started (CLI, deployment, schedule)."""
    problems = check_model(model).problems
    if problems:
        raise ConfigError("; ".join(problems))


def _has_chat_template(checkpoint: Path) -> bool:
    """Whether a local checkpoint's tokenizer carries a chat template (where transformers looks for one)."""
    if (checkpoint / "chat_template.jinja").is_file() or (checkpoint / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads((checkpoint / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False


def _check_chat_template(model: ModelConfig, data: DataConfig, report: InputReport) -> None:
    """data.chat_template=always needs a tokenizer with a template: say so now, not at the first prompt."""
    from essaflow.model.identity import BUILTIN_TINY

    if data.chat_template != "always":
        return
    name = model.name_or_path
    local = Path(name).expanduser()
    if name == BUILTIN_TINY or (local.is_dir() and (local / "config.json").is_file() and not _has_chat_template(local)):
        report.problems.append(
            f"data.chat_template: 'always', but the tokenizer of {name} has no chat template (use auto or never)"
        )


def _looks_like_a_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or (os.sep != "/" and os.sep in name)


def _check_s3(uri: str, field_name: str, report: InputReport) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key.strip("/"):
        report.problems.append(f"{field_name}: {uri!r} needs a bucket and a key (s3://bucket/path)")
    else:
        report.notes.append(f"{field_name}: {uri} (spelling checked; storage not contacted)")


def _check_model(name: str, report: InputReport) -> None:
    from essaflow.model.identity import BUILTIN_TINY, checkpoint_problem

    where = "model.name_or_path"
    if name == BUILTIN_TINY:
        report.notes.append(f"{where}: the built-in tiny model")
        return
    if name.startswith("s3://"):
        _check_s3(name, where, report)
        return
    local = Path(name).expanduser()
    if local.is_dir():
        problem = checkpoint_problem(local)
        if problem:
            report.problems.append(f"{where}: {local} {problem}")
        else:
            report.notes.append(f"{where}: local checkpoint {local}")
    elif local.exists():
        report.problems.append(f"{where}: {local} is a file; name the checkpoint's directory")
    elif _looks_like_a_path(name) or not is_hub_id(name):
        what = "does not exist" if _looks_like_a_path(name) else "is neither a local directory nor a hub id"
        report.problems.append(f"{where}: {name!r} {what}")
    else:
        report.notes.append(f"{where}: hub id {name} (spelling checked; not resolved offline)")


def _check_data(data: DataConfig, report: InputReport, where: str = "data.path") -> None:
    if data.source == "synthetic":
        report.notes.append("data: the built-in synthetic task")
        return
    assert data.path  # the config requires it for every other source
    if data.source == "s3":
        _check_s3(data.path, where, report)
        return
    local = Path(data.path).expanduser()
    if data.source == "hf" and not local.exists():
        if is_hub_id(data.path):
            report.notes.append(f"{where}: hub dataset {data.path} (spelling checked; not downloaded)")
        else:
            report.problems.append(f"{where}: {data.path!r} is neither a local path nor a hub dataset id")
        return
    # A local source is read and validated in full: what the run's first task would do.
    try:
        loaded = read_problems(data)
    except DataError as e:
        report.problems.append(f"{where}: {e}")
        return
    n = len(loaded.problems)
    dropped = f", {len(loaded.dropped)} malformed row(s) dropped" if loaded.dropped else ""
    report.notes.append(f"{where}: {data.path}: {n} problems{dropped}")
    if where == "data.path" and data.eval_size >= n:
        report.problems.append(f"data.eval_size={data.eval_size} leaves no training data out of {n} problems")
