"""`essaflow project-scaling`: ESSA vs GRPO time to accuracy on 1-128 GPUs from ESSA-v3's latency model (App. B)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from cli.common import emit

LABEL = "projection: ESSA-v3 App. B latency model, not a measurement"


def _gpu_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        typer.echo(f"error: --gpus must be whole numbers >= 1 separated by commas, got {text!r}", err=True)
        raise typer.Exit(2)
    return counts


def project_scaling(
    paper: Annotated[
        bool, typer.Option("--paper", help="print the paper preset's table (default without --from-run)")
    ] = False,
    from_run: Annotated[
        list[Path] | None,
        typer.Option(
            "--from-run",
            help="an ESSA and a GRPO run: metrics.jsonl files or a JSON run file (docs/scaling.md sec. 6.4)",
        ),
    ] = None,
    gpus: Annotated[str, typer.Option(help="GPU counts to project, comma-separated")] = "1,2,4,8,16,32,64,128",
    bandwidth_gbs: Annotated[float, typer.Option(help="GB/s per GPU of the collective's links")] = 50.0,
    grad_bytes: Annotated[
        float | None,
        typer.Option(help="model size in the all-reduce: bytes per all-reduce (paper preset; default: LoRA r 16 bf16)"),
    ] = None,
    adapt: Annotated[str, typer.Option(help="paper preset's LoRA modules: attention | all-linear")] = "attention",
    lora_rank: Annotated[int, typer.Option(help="paper preset's LoRA rank")] = 16,
    target: Annotated[float | None, typer.Option(help="--from-run: held-out greedy accuracy to reach")] = None,
) -> None:
    """Project ESSA's speed-up over GRPO (iteration times, time to accuracy) on 1-128 GPUs; a projection.

    The paper preset (Qwen2.5-32B, H100, ESSA-v3 Fig. 3) is calibrated on the paper's times; --from-run uses the
    costs an ESSA and a GRPO run measured. Prints tables, then one JSON line with a `projection` object.
    """
    from essaflow.projection import ProjectionError, table
    from essaflow.projection.measured import read_runs, run_projection, run_summary
    from essaflow.projection.paper import PaperSettings, paper_projection, paper_summary, physical_only_projection

    counts = _gpu_counts(gpus)
    try:
        settings = replace(
            PaperSettings(), bandwidth=bandwidth_gbs * 1e9, grad_bytes=grad_bytes, adapt=adapt, lora_rank=lora_rank
        )
        out = {"label": LABEL, "paper": paper_summary(settings)}
        if paper or not from_run:
            title = f"{LABEL}\nESSA-v3 Fig. 3 settings (Qwen2.5-32B, H100), calibrated on Fig. 3:"
            typer.echo(table(paper_projection(settings), counts, title))
            title = "\nthe same without the calibrated GRPO overhead (App. B as written):"
            typer.echo(table(physical_only_projection(settings), counts, title))
        if from_run:
            run_p = run_projection(read_runs(from_run), bandwidth_gbs * 1e9, target)
            typer.echo(table(run_p, counts, f"\n{LABEL}\nthe runs' own measured costs:"))
            out["run"] = run_summary(run_p)
    except ProjectionError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    emit({"projection": out})
