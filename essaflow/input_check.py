"""Do a config's inputs exist? The model and the data it names, checked offline before anything runs.

`essaflow check-config` calls this after the config itself validated: a model path that is no checkpoint (no
config.json, no weights, a weight file whose header or shard index is broken, no tokenizer files), a data file that
is missing or malformed, a column the file lacks, splits that would hold nothing out or leave nothing to train on
all fail here, with the field named, instead of minutes into a run; copies of a prompt with different answers get a
warning (or, dropped, their count). `essaflow run` checks the model the same way before it starts the flow, and
the data's rows with the reward tried on them where either is the user's (run_input_problems).
Nothing is downloaded: a hub id or an s3:// URI is checked for its spelling only, and the report says so.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from essaflow.config import DataConfig, ModelConfig, PipelineConfig
from essaflow.config_base import ConfigError
from essaflow.data import DataError, Problem, read_problems, split_problems
from essaflow.data.config import HeldOutSourceConfig
from essaflow.data.filters import KEPT_CONFLICTS, conflicting_groups, describe_conflicts, drop_conflicting_duplicates
from essaflow.storage.hub import is_hub_id


@dataclass
class InputReport:
    """``problems``: one line each, naming the field; ``notes``: what was checked, and what could not be offline."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_inputs(model: ModelConfig, data: DataConfig, held_out: HeldOutSourceConfig | None = None) -> InputReport:
    """The model and data a config names (and the held-out source, eval.data): each problem names its field."""
    report = InputReport()
    _check_model(model, report)
    _check_chat_template(model, data, report)
    _check_builtin_task(model, data, report)
    rows, _ = check_data_rows(data, held_out)
    report.problems += rows.problems
    report.notes += rows.notes
    return report


def check_data_rows(
    data: DataConfig, held_out: HeldOutSourceConfig | None = None
) -> tuple[InputReport, list[Problem] | None]:
    """The data a config names (and eval.data), read in full as the run's first task reads them, and the splits
    the run would make: the report, and the training problems read (None: not read here, a hub or S3 source, or
    unreadable). What check-config checks of the data, and `essaflow run` before Prefect starts."""
    report = InputReport()
    training = _check_data(data, report)
    held = _check_data(data.held_out(held_out), report, "eval.data.path") if held_out is not None else None
    if training is not None and (held_out is None or held is not None):
        _check_splits(data, training, held, report)
    return report, training


def check_model(model: ModelConfig) -> InputReport:
    """The model a config names, alone (what `essaflow run` checks before the flow starts)."""
    report = InputReport()
    _check_model(model, report)
    return report


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


#: data sources made by essaflow or a package it depends on: with a built-in reward, nothing a run reads is the user's
GENERATED = ("synthetic", "reasoning_gym", "humaneval")


def run_input_problems(cfg: PipelineConfig) -> tuple[list[str], list[str]]:
    """(problems, warnings), one line each naming the field, the file or the row: what a run (`essaflow run`, `demo`,
    `essa`, `grpo`) reads of its data and tries of its reward before its flow and Prefect's server start, so that
    bad rows and a reward that gives no score fail in seconds (before: 10-45 s into the run, each stage retried).

    The data's rows are read in full as check-config reads them (check_data_rows), then the reward is built and
    tried on the first rows' reference answers (essaflow.judging.reward_check). Nothing is read or tried for a
    built-in task (data.source synthetic, reasoning_gym or humaneval, no eval.data) judged by a built-in reward:
    the run's first task makes it, as check-config read it. Hub and S3 data are not read (the run downloads them)
    and their reward is only built. A reward of the user's own starts its processes here, which the run then uses."""
    from essaflow.judging.reward_ref import split_ref

    generated = cfg.data.source in GENERATED and cfg.eval.data is None
    if generated and split_ref(cfg.eval.reward)[0] == "builtin":
        return [], []
    from essaflow.judging.reward_check import check_reward
    from essaflow.sandbox.bubblewrap import SandboxUnavailable

    read, warnings = None, []
    if not generated:
        rows, read = check_data_rows(cfg.data, cfg.eval.data)
        warnings += [n for n in rows.notes if n.startswith("warning:")]
        if rows.problems:
            return rows.problems, warnings
    try:
        reward = check_reward(cfg.eval, cfg.data, read=read)
    except SandboxUnavailable as err:  # code_tests where the sandbox cannot start: its message names the fix
        return [str(err)], warnings
    return reward.problems, warnings + [n for n in reward.notes if n.startswith("warning:")]


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
    from essaflow.model.tiny_recipe import BUILTIN_MODELS

    if data.chat_template != "always":
        return
    name = model.name_or_path
    local = Path(name).expanduser()
    if name in BUILTIN_MODELS or (
        local.is_dir() and (local / "config.json").is_file() and not _has_chat_template(local)
    ):
        report.problems.append(
            f"data.chat_template: 'always', but the tokenizer of {name} has no chat template (use auto or never)"
        )


def _check_builtin_task(model: ModelConfig, data: DataConfig, report: InputReport) -> None:
    """A built-in tiny model knows only its own task's characters: on another synthetic task it would read unknowns."""
    from essaflow.model.tiny_recipe import BUILTIN_MODELS

    builtin = BUILTIN_MODELS.get(model.name_or_path)
    if builtin is None or data.source != "synthetic":
        return
    trained_on, task = builtin.recipe.task_name or "arithmetic", data.synthetic.task
    if trained_on != task:
        fits = next(n for n, m in BUILTIN_MODELS.items() if (m.recipe.task_name or "arithmetic") == task)
        report.problems.append(
            f"model.name_or_path: {model.name_or_path} is pretrained on {trained_on} and its tokenizer has only that "
            f"task's characters, but data.synthetic.task is {task!r}: use {fits}"
        )


def _looks_like_a_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~")) or (os.sep != "/" and os.sep in name)


def _check_s3(uri: str, field_name: str, report: InputReport) -> None:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket or not key.strip("/"):
        report.problems.append(f"{field_name}: {uri!r} needs a bucket and a key (s3://bucket/path)")
    else:
        report.notes.append(f"{field_name}: {uri} (spelling checked; storage not contacted)")


def _check_model(model: ModelConfig, report: InputReport) -> None:
    from essaflow.model.gguf import gguf_file, is_gguf_name
    from essaflow.model.identity import checkpoint_problem
    from essaflow.model.tiny_recipe import BUILTIN_MODELS

    name, where = model.name_or_path, "model.name_or_path"
    if name in BUILTIN_MODELS:
        report.notes.append(f"{where}: the built-in tiny model {name}")
        return
    if is_gguf_name(name):
        try:
            report.notes.append(f"{where}: GGUF {gguf_file(name)} (dequantized to {model.dtype} once, then cached)")
        except ValueError as e:
            report.problems.append(str(e))
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
            _note_remote_code(model, local, report)
    elif local.exists():
        report.problems.append(f"{where}: {local} is a file; name the checkpoint's directory")
    elif _looks_like_a_path(name) or not is_hub_id(name):
        what = "does not exist" if _looks_like_a_path(name) else "is neither a local directory nor a hub id"
        report.problems.append(f"{where}: {name!r} {what}{_relative_to_cwd(name)}")
    elif Path(name).parts and Path(Path(name).parts[0]).is_dir():  # `models/x` beside a local models/ folder
        report.problems.append(
            f"{where}: {name!r} does not exist{_relative_to_cwd(name)}, though {Path(name).parts[0]}/ does: it "
            "reads as a path, not a hub id; name the checkpoint's directory (or a hub id owner/name)"
        )
    else:
        report.notes.append(f"{where}: hub id {name} (spelling checked; not resolved offline)")


def _relative_to_cwd(name: str) -> str:
    """Where a relative path was looked for (a config read from another folder than the one it was written in)."""
    return "" if Path(name).expanduser().is_absolute() else f" (relative to the current directory {Path.cwd()})"


def _note_remote_code(model: ModelConfig, checkpoint: Path, report: InputReport) -> None:
    """A checkpoint whose config.json maps classes to its own Python files (auto_map) runs them when
    model.trust_remote_code lets it: say so, naming the files, before any process loads it."""
    try:
        config = json.loads((checkpoint / "config.json").read_text())
        auto_map, model_type = config.get("auto_map"), config.get("model_type")
    except (OSError, ValueError, AttributeError):
        return
    if auto_map and not model.trust_remote_code and not _known_architecture(model_type):
        report.problems.append(
            f"model.name_or_path: {checkpoint}/config.json has model_type {model_type!r}, which transformers does not "
            f"implement, and auto_map ({', '.join(sorted(auto_map))}): the model exists only as the checkpoint's own "
            "Python code, which model.trust_remote_code=false does not run; set it true only for a source you trust"
        )
        return
    if not auto_map or not model.trust_remote_code:
        return
    files = sorted(p.name for p in checkpoint.glob("*.py")) or ["(none here: fetched from the hub)"]
    report.notes.append(
        f"note: model.trust_remote_code: {checkpoint}/config.json has auto_map ({', '.join(sorted(auto_map))}): "
        f"loading it runs the checkpoint's own Python code ({', '.join(files)}) in every process that loads the "
        "model; keep trust_remote_code only for a source you trust"
    )


def _known_architecture(model_type: str | None) -> bool:
    """Whether transformers has its own classes for `model_type` (then it ignores a checkpoint's auto_map)."""
    from transformers import CONFIG_MAPPING

    return bool(model_type) and model_type in CONFIG_MAPPING


def _check_data(data: DataConfig, report: InputReport, where: str = "data.path") -> list[Problem] | None:
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
        _check_s3(data.path, where, report)
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


def _conflicts(data: DataConfig, problems: list[Problem], report: InputReport, where: str) -> list[Problem] | None:
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


def _check_splits(data: DataConfig, problems: list[Problem], held: list[Problem] | None, report: InputReport) -> None:
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
