"""`essaflow essa|grpo|build-tiny`: the pipeline's stages and the tiny-model build, in this process, no Prefect."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import ConfigOpt, SetOpt, emit, fail, load, refuse, setup_logging
from essaflow.config import PipelineConfig
from essaflow.methods import ESSA, FGRPO, METHODS, Method


def _training_job(cfg: PipelineConfig) -> None:
    """The job's JSON line, or on failure its error as the JSON line (traceback in the log with --verbose). The
    run's preflight first (model, Ray head, hub id): a job tracks nothing, so no tracking server is checked; its
    stages open the store at storage_uri as they write to it (essaflow/stages/job.py)."""
    from cli.pipeline import preflight
    from essaflow.secrets import scrub

    preflight(cfg, services=False)
    from essaflow.stages.job import run_training_job  # the model stack: seconds of imports, after the preflight

    try:
        out = run_training_job(cfg)
    except Exception as err:
        logging.getLogger("essaflow.stages.job").info("job failed", exc_info=True)
        fail(scrub(f"{type(err).__name__}: {err}"), f"{cfg.method} job", None, [])
    emit(out)


def _job_config(config: Path | None, set_: list[str] | None, method: Method) -> PipelineConfig:
    """The config with `method` (the command's trainer); a config (or --set) that names another trainer is refused
    before compute: the job would train with the other section's defaults and ignore the one given."""
    cfg = load(config, set_)
    named = METHODS.get(cfg.method)
    if "method" in cfg.model_fields_set and named.trains and named is not method:
        given = any(w.strip().startswith("method=") for w in set_ or [])
        where = "--set says" if given or config is None else f"{config} says"
        refuse([f"{where} method: {cfg.method}, but `essaflow {method.command}` trains {method.name}: run `essaflow "
                f"{named.command}` (or `essaflow run`) on it, or set method: {method.name}"])  # fmt: skip
    return cfg.model_copy(update={"method": method.name})


def essa(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then ESSA; prints before/after held-out accuracy as JSON last. A config whose
    method is fgrpo is refused (`essaflow grpo` trains it)."""
    setup_logging(verbose)
    _training_job(_job_config(config, set_, ESSA))


def grpo(config: ConfigOpt = None, set_: SetOpt = None, verbose: bool = False) -> None:
    """SFT warm start (cached) then GRPO / F-GRPO; prints before/after held-out accuracy as JSON last. A config
    whose method is essa is refused (`essaflow essa` trains it)."""
    setup_logging(verbose)
    _training_job(_job_config(config, set_, FGRPO))


def build_tiny(
    out: Annotated[Path | None, typer.Option(help="target directory")] = None,
    model: Annotated[str, typer.Option(help="builtin:tiny, builtin:tiny-countdown or builtin:tiny-programs")] = (
        "builtin:tiny"
    ),
) -> None:
    """(Re)build an embedded tiny base model into the package, where runs find it (--out: anywhere)."""
    from essaflow.model.tiny_recipe import BUILTIN_MODELS  # no torch: a wrong name is answered in a blink

    if model not in BUILTIN_MODELS:
        fail(f"--model {model!r}: not a built-in model; choose from {sorted(BUILTIN_MODELS)}", "build-tiny", None, [])
    problem = _out_problem(out) if out is not None else None
    if problem:  # checked before the minutes of building, not after
        fail(f"--out {str(out)!r}: {problem}", "build-tiny", None, [])
    from essaflow.model.tiny import SHIPPED_DIRS, build_tiny_base

    recipe = BUILTIN_MODELS[model].recipe
    default = SHIPPED_DIRS[model]
    start = time.perf_counter()
    path = build_tiny_base(out or default, recipe)
    emit({"path": str(path), "model": model, "wall_s": round(time.perf_counter() - start, 1)})


def _out_problem(out: Path) -> str | None:
    """Why the model cannot be written to `out` (its folder is made next to it, then moved in place), or None."""
    import tempfile

    if out.exists() and not out.is_dir():
        return "is a file, not a directory"
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=parent):
            pass
    except OSError as err:
        return f"cannot write in {str(parent)!r} ({err.strerror or type(err).__name__}): give a writable directory"
    return None
