"""`essaflow demo|run|eval`: the Prefect flows, run in this process, with progress bars on stderr."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from cli.common import ConfigOpt, SetOpt, emit, fail, flow_logging, load, refuse, service_env
from cli.prefect_server import prefect_api, start_temporary_server
from essaflow.config import PipelineConfig
from essaflow.methods import METHODS
from essaflow.refs import PipelineResult
from essaflow.runs.line import json_line, overhead
from essaflow.secrets import mask_passwords, uri_passwords_to_env

ForceOpt = Annotated[
    bool,
    typer.Option(help="train even when the data snapshot, config and base model equal the last completed run's"),
]
ResumeOpt = Annotated[
    str | None,
    typer.Option(help="continue a failed run from its newest checkpoint: its run id, or 'last' (newest failed run)"),
]


@contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Rich bars for the pipeline's stages and for training, fed by tasks.progress while the flow runs here."""
    if not enabled:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tasks.progress import LISTENERS

    bars: dict[str, Any] = {}
    columns = (TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TextColumn("{task.fields[note]}"), console=Console(stderr=True)) as bar:

        def listener(stage: str, done: float, total: float, note: str) -> None:
            if stage not in bars:
                bars[stage] = bar.add_task(stage, total=total, note="")
            bar.update(bars[stage], completed=done, total=total, note=note[:60])

        LISTENERS.append(listener)
        try:
            yield
        finally:
            LISTENERS.remove(listener)


def quiet_console_tracebacks() -> None:
    """Tracebacks stay in the run's log (Prefect's API handler, the UI); the terminal gets the one-line messages."""
    import logging

    from prefect.logging.handlers import PrefectConsoleHandler

    from tasks.failures import StripTracebacks

    for handler in logging.getLogger().handlers:
        if isinstance(handler, PrefectConsoleHandler) and not any(
            isinstance(f, StripTracebacks) for f in handler.filters
        ):
            handler.addFilter(StripTracebacks())


def rerun_command(argv: list[str], set_: list[str] | None) -> list[str]:
    """The command that ran, as `essaflow ...` words, for the resume hint (every --set repeated, URI passwords
    masked: the hint is printed and logged)."""
    return ["essaflow", *argv, *(w for item in set_ or [] for w in ("--set", mask_passwords(item)))]


def credentials_to_env(params: Any) -> Any:
    """`params` with each URI setting that carries a password moved into its environment variable (this process's,
    which the flow runs in), so the flow-run parameters Prefect stores hold no password; the run resolves the same
    URI from there (None in the config means the environment's)."""
    return uri_passwords_to_env(params)


def preflight(cfg: PipelineConfig, services: bool = True, resume: str | None = None) -> None:
    """What a run needs and the config alone cannot say, checked before the flow starts: the model's checkpoint
    (a local directory with config.json, weights and tokenizer files; a hub id that resolves), a Ray head answering
    where training joins one, the environment variables it reads (numbers, a writable cache directory, S3 settings)
    and (`services`) the artifact store (S3: its endpoint, bucket and keys) and the MLflow tracking server
    answering, and the run `resume` names (a malformed or unknown id, another pipeline's run, a completed run);
    the data's rows read and the reward tried on them, unless both are built in (essaflow/checks/preflight.py):
    seconds, not Prefect's start-up or the model stack's imports first."""
    from essaflow.artifacts.store import check_storage, storage_uri_for
    from essaflow.checks.notes import config_notes
    from essaflow.checks.preflight import first_problems, require_reachable, run_input_problems
    from essaflow.cluster import ClusterUnreachable
    from essaflow.config import ConfigError
    from essaflow.secrets import scrub
    from essaflow.storage import StorageError
    from essaflow.tracking.server import TrackingError, check_tracking, resolve_tracking_uri

    for note in config_notes(cfg):  # a valid config that may not do what was meant: said, not refused
        typer.echo(note, err=True)
    problems = first_problems(cfg)  # the checkpoint, a GPU for cuda, a data file not there, ESSAFLOW_HEARTBEAT_S=abc
    if problems:
        refuse(problems)
    problems, warnings = run_input_problems(cfg)  # bad rows, a reward giving no score (nothing for built-in tasks)
    for warning in warnings:
        typer.echo(scrub(warning), err=True)
    if problems:
        refuse(problems)
    try:
        require_reachable(cfg)  # a Ray head that does not answer, a hub id that resolves nowhere
        if services:
            storage_uri = check_storage(storage_uri_for(cfg.storage_uri))  # an S3 endpoint down, a bucket missing
            tracking_uri = resolve_tracking_uri(cfg.tracking_uri)
            check_tracking(tracking_uri)  # a dead MLflow server: at once, not when the run opens
    except (ClusterUnreachable, ConfigError, StorageError, TrackingError) as err:
        fail(f"{type(err).__name__}: {scrub(str(err))}", "preflight", None, [])
    if resume and services:
        _check_resume(cfg, resume, storage_uri, tracking_uri)


def _check_resume(cfg: PipelineConfig, resume: str, storage_uri: str, tracking_uri: str) -> None:
    """The run `resume` names, resolved as the run's first task will (essaflow/runs/resume.py): a malformed or
    unknown id, `last` with no failed run, another pipeline's run or a completed one refused before Prefect starts;
    anything else (the tracking server's own errors) is left to the run, which reports it."""
    from essaflow.config import ConfigError
    from essaflow.runs.resume import resolve_run_id
    from essaflow.storage import open_store

    try:
        resolve_run_id(resume, open_store(storage_uri), tracking_uri, cfg)
    except ConfigError as err:
        refuse([str(err)])
    except Exception as err:  # noqa: BLE001 - the run's open_run meets it again, with retries and its report
        logging.getLogger(__name__).info("--resume %s not checked ahead: %s", resume, err)


def orchestration_error(err: Exception) -> str:
    """The orchestrator's own failure (its API unreachable, its temporary server not started) as one line naming
    Prefect and where its API is (Prefect's client says only "API")."""
    from prefect.settings import PREFECT_API_URL

    from essaflow.runs.failure import describe

    where = PREFECT_API_URL.value()
    if not where:
        return f"Prefect's temporary local server: {describe(err)}"
    fix = "start it (essaflow stack up), or unset PREFECT_API_URL to run on a temporary local server"
    return f"Prefect API at {mask_passwords(where)}: {describe(err)}; {fix}"


def fail_unless_completed(state: Any, rerun: list[str], name_run: bool = True) -> None:
    """A flow run that did not complete ends the command through `fail`: its failed stage's error (else the flow's),
    the run id when `name_run` (with the command that resumes it, given `rerun`), exit status 1."""
    from essaflow.runs.failure import describe
    from tasks import failures

    failure, run_id = failures.pop(str(state.state_details.flow_run_id))
    if state.is_completed():
        return
    try:
        state.result()
        error = state.message or state.name
    except BaseException as err:
        error = describe(err)
    run_id = run_id if name_run else None
    if failure is None:
        fail(error, "flow", run_id, rerun)
    else:  # a failure no retry can fix (a missing file, a bad config) is offered no resume: it would fail alike
        fail(failure.error, failure.stage, run_id, rerun if failure.resumable else [])


@dataclass
class Ahead:
    """What the command did before its flow while Prefect's temporary server started."""

    parts: dict[str, float] = field(default_factory=dict)
    """Seconds loading what the stages need (essaflow/stages/preload.py), by the part the stage would count them in."""
    server_wait_s: float = 0.0
    """Seconds then still spent waiting for the server to answer."""


def finetune_summary(
    cfg: PipelineConfig,
    progress: bool,
    resume: str | None = None,
    rerun: list[str] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run the finetune flow in this process (Prefect's temporary local API unless PREFECT_API_URL is set: started
    first, while the command loads what the stages need, essaflow/stages/preload.py).

    On failure: the failed stage's error as one line on stderr and as the JSON line last on stdout, with the run id
    and the command that resumes it; exit status 1 (the traceback is in the run's log, not on the terminal).
    A run with nothing new (essaflow/runs/skip.py) reports `state: skipped` and the reason.
    """
    start = time.perf_counter()
    service_env()
    server = start_temporary_server()  # first: it starts beside everything below (cli/prefect_server.py)
    rerun = rerun or ["essaflow", "run"]
    state, ahead = _finetune_state(cfg, progress, resume, rerun, force, server)
    fail_unless_completed(state, rerun)
    result = state.result()
    wall = round(time.perf_counter() - start, 2)
    if state.name == "Skipped":
        return {**result.model_dump(), "wall_s": wall}
    from essaflow.generation.sampling import resolve_backend

    return completed_line(result, wall, ahead, resolve_backend(cfg.sampling.backend))


def completed_line(result: PipelineResult, wall: float, ahead: Ahead, engine: str) -> dict[str, Any]:
    """A completed run's JSON line: every stage's fields (essaflow/runs/line.py; `essaflow essa|grpo` give those
    of the stages they run), its time apart from compute, and `engine`: what generated (evaluation, ESSA scoring,
    GRPO rollouts)."""
    out = with_overhead(result.model_dump(), wall, ahead)
    return json_line({"state": "completed", **out, "engine": engine})


def with_overhead(out: dict[str, Any], wall: float, ahead: Ahead) -> dict[str, Any]:
    """The run's result with the command's wall time and what of it was not compute: storage, tracking and the
    rest (orchestration: Prefect's start-up and its task runs); what was loaded ahead for the stages counts as
    the parts those stages would have timed it as, and as its own `preload` stage."""
    out["parts"] = {k: round(v + ahead.parts.get(k, 0.0), 2) for k, v in out["parts"].items()}
    if ahead.parts:
        out["stages"] = {"preload": round(sum(ahead.parts.values()), 2), **out["stages"]}
    out["wall_s"] = wall
    out["overhead"] = overhead(out["parts"], wall, ahead.server_wait_s)
    return out


def _finetune_state(
    cfg: PipelineConfig, progress: bool, resume: str | None, rerun: list[str], force: bool, server: Any
) -> tuple[Any, Ahead]:
    """The finetune flow's final state, and what was done ahead of it while `server` (Prefect's temporary server,
    None when PREFECT_API_URL names one) started; the orchestrator's own failure (Prefect's API unreachable, its
    temporary server not started) ends the command in one line naming it."""
    from essaflow.stages.preload import preload
    from flows.finetune import finetune

    quiet_console_tracebacks()
    ahead = Ahead(preload(cfg, busy=lambda: not server.ready()) if server is not None else {})
    try:
        with prefect_api(server) as waited, progress_bars(progress):
            ahead.server_wait_s = waited
            return finetune(credentials_to_env(cfg), resume=resume, force=force, return_state=True), ahead
    except Exception as err:
        fail(orchestration_error(err), "orchestration", resume if resume and resume != "last" else None, rerun)
        raise  # not reached: fail() exits


def demo(
    method: Annotated[str, typer.Option(help="essa | fgrpo | none")] = "essa",
    config: ConfigOpt = None,
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    resume: ResumeOpt = None,
    force: ForceOpt = False,
    verbose: bool = False,
) -> None:
    """The main job on the embedded default: the whole finetune flow (tiny model, synthetic data, local services)."""
    flow_logging(verbose)
    methods = get_args(PipelineConfig.model_fields["method"].annotation)
    if method not in methods:
        refuse([f"--method {method!r}: choose one of {', '.join(methods)}"])
    if config is None:
        preset = METHODS.get(method).preset
        config = Path(__file__).resolve().parent.parent / "configs" / preset
        config = config if config.exists() else None
    cfg = load(config, set_, method=method)
    preflight(cfg, resume=resume)
    argv = ["demo", "--method", method, *(["-c", str(config)] if config else [])]
    emit(finetune_summary(cfg, progress, resume, rerun_command(argv, set_), force))


def run(
    config: Annotated[Path, typer.Argument(help="YAML preset (configs/*.yaml)")],
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    resume: ResumeOpt = None,
    force: ForceOpt = False,
    verbose: bool = False,
) -> None:
    """Run the finetune flow locally: data -> pass@k -> SFT -> ESSA/F-GRPO -> pass@k -> the promotion gate."""
    flow_logging(verbose)
    cfg = load(config, set_)
    preflight(cfg, resume=resume)
    emit(finetune_summary(cfg, progress, resume, rerun_command(["run", str(config)], set_), force))


def eval_(
    target: Annotated[
        str | None, typer.Argument(help="models:/NAME@ALIAS (instead of --model and --alias)", show_default=False)
    ] = None,
    model: Annotated[str, typer.Option("--model", help="registered model name")] = "tiny-arith",
    alias: Annotated[str, typer.Option(help="alias to evaluate")] = "champion",
    base: Annotated[bool, typer.Option("--base", help="evaluate the config's model.name_or_path, no adapter")] = False,
    config: ConfigOpt = None,
    set_: SetOpt = None,
    verbose: bool = False,
) -> None:
    """pass@k of a registered model version: `essaflow eval models:/NAME@ALIAS` (or --model NAME --alias ALIAS);
    without -c, on the dataset and protocol its tags record (data, eval, sampling at registration; --set still
    applies), else with the config's. A model or alias the registry lacks fails before anything is evaluated.
    `essaflow eval --base -c CONFIG`: the config's base model as it is (HumanEval of the base, say)."""
    flow_logging(verbose)
    if target is not None and base:
        refuse([f"--base evaluates the config's model.name_or_path: give it without {target}"])
    if target is not None:
        model, alias = _model_and_alias(target)
    cfg = load(config, set_)
    _refuse_bad_environment(cfg)
    service_env()
    if base:
        model, alias = cfg.name, "base"
    else:
        _require_version(cfg, model, alias)
    if config is None and not base:
        cfg = _recorded_protocol(cfg, model, alias, set_ or [])
    from flows.evaluate import EvaluateParams, evaluate_model

    params = EvaluateParams(
        model_name=model, alias=alias, data=cfg.data, eval=cfg.eval, sampling=cfg.sampling,
        storage_uri=cfg.storage_uri, tracking_uri=cfg.tracking_uri, base_model=cfg.model if base else None,
    )  # fmt: skip
    start = time.perf_counter()
    quiet_console_tracebacks()
    try:
        state = evaluate_model(credentials_to_env(params), return_state=True)
    except Exception as err:  # the orchestrator itself (e.g. Prefect's API unreachable): one line, as gc and run
        fail(orchestration_error(err), "orchestration", None, [])
    fail_unless_completed(state, [], name_run=False)
    ref = state.result()
    emit(
        {
            "model": cfg.model.name_or_path if base else f"{model}@{alias}",
            "pass_at_k": ref.summary,
            "judged_with": cfg.eval.judged_with(),
            "truncated_share": ref.truncated_share,
            "report_uri": ref.uri,
            "wall_s": round(time.perf_counter() - start, 2),
        }
    )


def _refuse_bad_environment(cfg: PipelineConfig) -> None:
    """A numeric variable that is no number, a cache directory that cannot be written, S3 variables boto3 refuses:
    one line each (exit 2, the JSON line) before the registry or Prefect is asked anything."""
    from essaflow.checks.environment import environment_problems

    problems = environment_problems(cfg)
    if problems:
        refuse(problems)


def _model_and_alias(target: str) -> tuple[str, str]:
    """(name, alias) of the command's models:/NAME@ALIAS; a usage error (exit 2, the JSON line) otherwise."""
    from essaflow.tracking.aliases import parse_model_uri

    try:
        return parse_model_uri(target)
    except ValueError as err:
        refuse([str(err)])


def _require_version(cfg: PipelineConfig, model: str, alias: str) -> None:
    """The registry names a version for model@alias, else one line and the JSON line (before Prefect starts)."""
    from essaflow.tracking import TrackingError, resolve_tracking_uri
    from essaflow.tracking.aliases import registered_version

    try:
        registered_version(resolve_tracking_uri(cfg.tracking_uri), model, alias)
    except TrackingError as err:
        fail(f"TrackingError: {err}", "preflight", None, [])


def _recorded_protocol(cfg, model: str, alias: str, overrides: list[str]):
    """cfg with the data, eval and sampling sections recorded in models:/model@alias's tags (overrides on top);
    cfg unchanged for a version without those tags or a registry that cannot be read."""
    from essaflow.config import apply_overrides, parse_config
    from essaflow.tracking import resolve_tracking_uri
    from essaflow.tracking.protocol import registered_protocol

    try:
        recorded = registered_protocol(resolve_tracking_uri(cfg.tracking_uri), model, alias)
    except Exception as err:  # noqa: BLE001 - the flow reports a missing model or registry with its own error
        logging.getLogger(__name__).info("no recorded protocol for %s@%s: %s", model, alias, err)
        return cfg
    if not recorded:
        return cfg
    tree = {**cfg.model_dump(mode="json", exclude={"data", "eval", "sampling"}), **recorded}
    typer.echo(f"evaluating {model}@{alias} on its recorded dataset and protocol (pass -c to override)", err=True)
    return parse_config(apply_overrides(tree, overrides, PipelineConfig))
