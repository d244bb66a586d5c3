"""Is the model a config names loadable? Checked offline before anything runs, each problem naming
model.name_or_path.

A local checkpoint needs config.json, whole weight files (their safetensors headers and shard index read,
essaflow/model/weights_check.py, which the loader checks too) and tokenizer files; a GGUF file must exist; an s3://
URI and a hub id are checked for their spelling (a hub id resolves in :func:`require_resolvable`, which a run and a
job call before they prepare data). A built-in tiny model reads only its own task's characters, and
data.chat_template=always needs a tokenizer with a template. A checkpoint whose own Python code would run
(auto_map) is said, or refused where model.trust_remote_code does not let it run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from essaflow.checks.findings import Findings, s3_spelling
from essaflow.config_base import ConfigError
from essaflow.data.config import DataConfig
from essaflow.model.config import ModelConfig
from essaflow.model.gguf import gguf_file, is_gguf_name
from essaflow.model.tiny_recipe import BUILTIN_MODELS
from essaflow.storage.hub import hub_commit, is_hub_id


def check_model(model: ModelConfig) -> Findings:
    """The model a config names, alone (what `essaflow run` checks before the flow starts)."""
    report = Findings()
    _check_model(model, report)
    return report


def require_model(model: ModelConfig) -> None:
    """ConfigError naming the path and what it lacks unless the model a config names looks loadable (check_model):
    what a run checks first, wherever it was started (CLI, deployment, schedule)."""
    problems = check_model(model).problems
    if problems:
        raise ConfigError("; ".join(problems))


def require_resolvable(cfg: ModelConfig) -> None:
    """ConfigError naming model.name_or_path unless a hub id's revision resolves (the hub, else the local HF cache):
    what a run and a job check before they prepare data. The built-in model, s3:// and local paths pass here."""
    name = cfg.name_or_path
    if is_gguf_name(name):
        gguf_file(name)  # a ConfigError naming the field when the file or its package is missing
        return
    if name not in BUILTIN_MODELS and not name.startswith("s3://") and not Path(name).expanduser().exists():
        hub_commit(name, cfg.revision, field="model.name_or_path")


def check_model_fits_data(model: ModelConfig, data: DataConfig) -> Findings:
    """The model against the data it will read: a tokenizer with a chat template where data.chat_template=always, a
    built-in tiny model on its own synthetic task."""
    report = Findings()
    _check_chat_template(model, data, report)
    _check_builtin_task(model, data, report)
    return report


def _has_chat_template(checkpoint: Path) -> bool:
    """Whether a local checkpoint's tokenizer carries a chat template (where transformers looks for one)."""
    if (checkpoint / "chat_template.jinja").is_file() or (checkpoint / "chat_template.json").is_file():
        return True
    try:
        return bool(json.loads((checkpoint / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False


def _check_chat_template(model: ModelConfig, data: DataConfig, report: Findings) -> None:
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


def _check_builtin_task(model: ModelConfig, data: DataConfig, report: Findings) -> None:
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


def _check_model(model: ModelConfig, report: Findings) -> None:
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
        s3_spelling(name, where, report)
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


def _note_remote_code(model: ModelConfig, checkpoint: Path, report: Findings) -> None:
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
