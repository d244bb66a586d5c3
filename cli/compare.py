"""`essaflow compare CONFIG`: the compare flow in this process; prints the report's JSON as its last line."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from cli.common import SetOpt, emit, fail, flow_logging, refuse, service_env
from cli.pipeline import fail_unless_completed, progress_bars, quiet_console_tracebacks
from essaflow.config_base import ConfigError
from essaflow.secrets import scrub


def compare_methods(
    config: Annotated[Path, typer.Argument(help="compare YAML (configs/compare-tiny.yaml)")],
    set_: SetOpt = None,
    progress: Annotated[bool, typer.Option(help="progress bars on stderr")] = True,
    verbose: bool = False,
) -> None:
    """Compare methods (ESSA, GRPO, F-GRPO, ...) from one SFT start on one task: methods x seeds under one training
    budget, pass@k to k = n, a parent MLflow run with a child per run, a report with figures and a projection.

    --set applies to the compare file: budget_s=30, seeds=[0], task.eval.samples_per_problem=64.
    """
    flow_logging(verbose)
    from essaflow.compare import load_compare_config

    try:
        cfg = load_compare_config(config, set_)
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    from essaflow.checks.environment import environment_problems

    problems = environment_problems(cfg.task)  # ESSAFLOW_HEARTBEAT_S=abc, an unwritable cache: before Prefect
    if problems:
        refuse(problems)
    service_env()
    from essaflow.runs.failure import describe
    from flows.compare import compare as compare_flow

    quiet_console_tracebacks()
    start = time.perf_counter()
    try:
        with progress_bars(progress):
            state = compare_flow(cfg, return_state=True)
    except Exception as err:  # the orchestrator itself
        fail(describe(err), "orchestration", None, [])
    fail_unless_completed(state, [])
    for line in _summary_lines(state.result()):
        typer.echo(line, err=True)
    emit({**state.result(), "wall_s": round(time.perf_counter() - start, 2)})


def compare_table(
    reports: Annotated[
        list[str], typer.Argument(help="comparison.json files, or report folders / URIs (file://, s3://)")
    ],
) -> None:
    """The task x method table of several comparisons in one markdown table (one per task; docs/compare.md): the
    rows each report computed, stacked in the order given. Prints the table, then the rows as the JSON line."""
    from essaflow.compare.task_table import markdown, report_rows

    rows = []
    for where in reports:
        try:
            body = _read_report(where)
        except Exception as err:
            fail(f"{where}: {scrub(str(err))}", "compare-table", None, [])
        try:
            rows.extend(report_rows(body))  # a list, {}, an unrelated JSON, a malformed row: said what is wrong
        except ValueError as err:
            fail(f"{where}: {err}", "compare-table", None, [])
    for line in markdown(rows):
        typer.echo(line)
    emit({"rows": rows})


def _read_report(where: str) -> dict:
    """A comparison.json: a local file, or the one in a report folder or storage prefix (the compare JSON's
    report_uri)."""
    import json

    from essaflow.storage.factory import open_store

    if where.endswith(".json") and "://" not in where:
        return json.loads(Path(where).read_text())
    return open_store(where).get_json("comparison.json")


def _summary_lines(body: dict) -> list[str]:
    """A few readable lines on stderr before the JSON line: each method's mean pass@1 / pass@n / greedy."""
    top = f"pass@{max(int(k.split('@')[1]) for k in body['runs'][0] if k.startswith('pass@'))}"
    seeds, budget = len(body["seeds"]), body["budget_s"]
    lines = [f"comparison {body['compare']} ({seeds} seeds, {budget:g} s each): {body['report_uri']}"]
    sft = body["sft"]
    lines.append(f"  SFT start: pass@1 {sft['pass@1']:.3f}  {top} {sft[top]:.3f}  greedy {sft['greedy']:.3f}")
    for method, t in body["methods"].items():
        lines.append(
            f"  {method:<12} {t['label']:<22} pass@1 {t['pass@1']['mean']:.3f}±{t['pass@1']['std']:.3f}  "
            f"{top} {t[top]['mean']:.3f}±{t[top]['std']:.3f}  greedy {t['greedy']['mean']:.3f}±{t['greedy']['std']:.3f}"
        )
    paper, run = body["projection"]["paper"], body["projection"]["run"]
    lines.append(
        f"  {body['projection']['label']}: paper settings {paper['speedup_16']}x @16, {paper['speedup_128']}x @128 "
        f"GPUs; this run's costs {run.get('speedup_16', 'n/a')}x @16, {run.get('speedup_128', 'n/a')}x @128"
    )
    return lines
