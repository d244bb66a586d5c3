"""The latency model fed with a run's own measured costs: an ESSA run and a GRPO run, read from their metrics.

Input files (docs/scaling.md sec. 6.4), one per run or one for both:

- `metrics.jsonl`: one JSON row per generation / step, as the trainers record them (`GenerationMetrics` and
  `StepMetrics` of essa/metrics.py and grpo/metrics.py, held-out rows with `eval_greedy`); the method is told by
  the rows' keys.
- `*.json`: `{"metrics": [rows], "workers": W, "population": N, "minibatch": b, "mini_batches": k}` (what the rows
  do not record; all optional), or `{"essa": {...}, "grpo": {...}}` with one such object per method.

What each cost is made of (medians over the rows, so a slow first generation does not dominate):
ESSA: worker-seconds per candidate = workers / candidates_per_s; population = sum(per_worker); bytes per
generation = `bytes`; non-scaling overhead = wall_s - population / candidates_per_s (the driver's ask/tell).
GRPO: sequences per step = gen_tokens / completion_len; GPU-seconds per sequence of generation = workers x gen_s /
sequences, of training = workers x train_s / sequences; M = trainable_bytes; all-reduces = bytes_allreduced / M;
overhead = step_s - gen_s - train_s. Iterations to target: the first generation / step whose held-out greedy
accuracy reaches the target (default: the best accuracy both runs reach).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from essaflow.projection import EssaIteration, GradIteration, Projection, ProjectionError, summary


@dataclass(frozen=True)
class RunMetrics:
    """One run's rows and the settings its rows do not record."""

    method: str
    """'essa' or 'grpo' (GRPO, DAPO, CISPO and their F- variants)."""
    rows: list[dict[str, Any]]
    """The metrics rows, in order."""
    settings: dict[str, Any]
    """workers, population, minibatch, mini_batches where given."""


def _method(rows: list[dict[str, Any]], where: str) -> str:
    if any("candidates_per_s" in r for r in rows):
        return "essa"
    if any("gen_s" in r and "train_s" in r for r in rows):
        return "grpo"
    raise ProjectionError(
        f"{where}: no ESSA generation rows (candidates_per_s) or GRPO step rows (gen_s, train_s) in the metrics"
    )


def _run(obj: dict[str, Any], where: str) -> RunMetrics:
    rows = obj.get("metrics")
    if not isinstance(rows, list) or not rows:
        raise ProjectionError(f"{where}: no 'metrics' list of per-generation / per-step rows")
    settings = {k: obj[k] for k in ("workers", "population", "minibatch", "mini_batches") if k in obj}
    return RunMetrics(_method(rows, where), rows, settings)


def read_runs(paths: list[Path]) -> dict[str, RunMetrics]:
    """The runs in the given files, by method; exactly one ESSA and one GRPO run are needed."""
    runs: dict[str, RunMetrics] = {}
    for path in paths:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as err:
            raise ProjectionError(f"cannot read {path}: {err}") from None
        try:
            if path.suffix == ".jsonl":
                found = [_run({"metrics": [json.loads(line) for line in text.splitlines() if line.strip()]}, str(path))]
            else:
                obj = json.loads(text)
                if not isinstance(obj, dict):
                    raise ProjectionError(f"{path}: expected a JSON object")
                parts = [obj[k] for k in ("essa", "grpo") if isinstance(obj.get(k), dict)]
                found = [_run(p, str(path)) for p in parts] if parts else [_run(obj, str(path))]
        except json.JSONDecodeError as err:
            raise ProjectionError(f"{path}: not JSON ({err})") from None
        for run in found:
            if run.method in runs:
                raise ProjectionError(f"two {run.method} runs given ({path}); pass one ESSA and one GRPO run")
            runs[run.method] = run
    missing = {"essa", "grpo"} - set(runs)
    if missing:
        raise ProjectionError(f"--from-run needs an ESSA and a GRPO run; missing: {', '.join(sorted(missing))}")
    return runs


def _median(rows: list[dict[str, Any]], fn, what: str) -> float:
    values = []
    for r in rows:
        try:
            values.append(float(fn(r)))
        except (KeyError, TypeError, ZeroDivisionError):
            continue
    if not values:
        raise ProjectionError(f"the rows record no {what}")
    return statistics.median(values)


def essa_costs(run: RunMetrics) -> tuple[EssaIteration, dict[str, Any]]:
    """ESSA's generation from its rows: worker-seconds per candidate, population, bytes, driver overhead."""
    rows = [r for r in run.rows if r.get("candidates_per_s")]
    workers = run.settings.get("workers") or round(_median(rows, lambda r: len(r["per_worker"]), "per_worker"))
    population = run.settings.get("population") or round(_median(rows, lambda r: sum(r["per_worker"]), "population"))
    per_candidate = _median(rows, lambda r: workers / r["candidates_per_s"], "candidates_per_s")
    minibatch = run.settings.get("minibatch")
    overhead = _median(rows, lambda r: max(0.0, r["wall_s"] - population / r["candidates_per_s"]), "wall_s")
    essa = EssaIteration(
        population=int(population),
        minibatch=int(minibatch or 1),
        eta_gen=per_candidate / (minibatch or 1),
        bytes_per_generation=_median(rows, lambda r: r["bytes"], "bytes"),
        overhead_s=overhead,
    )
    notes = {"workers": workers, "worker_s_per_candidate": round(per_candidate, 4), "overhead_s": round(overhead, 4)}
    if not minibatch:
        notes["gap"] = "minibatch not recorded: costs are per candidate, not per sequence"
    return essa, notes


def grpo_costs(run: RunMetrics) -> tuple[GradIteration, dict[str, Any]]:
    """GRPO's iteration from its step rows: per-sequence generation and training costs, trainable bytes."""
    rows = [r for r in run.rows if "gen_s" in r and "train_s" in r]
    workers = int(run.settings.get("workers", 1))
    seqs = _median(rows, lambda r: r["gen_tokens"] / r["completion_len"], "gen_tokens / completion_len")
    trainable = _median(rows, lambda r: r["trainable_bytes"], "trainable_bytes")
    allreduced = _median(rows, lambda r: r["bytes_allreduced"], "bytes_allreduced") if trainable else 0.0
    allreduces = round(allreduced / trainable) if allreduced and trainable else int(run.settings.get("mini_batches", 1))
    grad = GradIteration(
        batch=seqs,
        eta_fb=_median(rows, lambda r: workers * r["train_s"] / seqs, "train_s"),
        eta_gen=_median(rows, lambda r: workers * r["gen_s"] / seqs, "gen_s"),
        trainable_bytes=trainable,
        allreduces=max(1, allreduces),
        overhead_s=_median(rows, lambda r: max(0.0, r["step_s"] - r["gen_s"] - r["train_s"]), "step_s"),
    )
    notes = {"workers": workers, "sequences_per_step": round(seqs, 1), "allreduces_per_step": grad.allreduces}
    if "workers" not in run.settings:
        notes["gap"] = "GRPO ranks not recorded in the rows: assumed 1 (pass 'workers' in a JSON run file)"
    return grad, notes


#: what each latency model's rows count their iterations by
_ITERATION_KEY = {"essa": "generation", "grpo": "step"}


def _curve(run: RunMetrics) -> list[tuple[int, float]]:
    key = _ITERATION_KEY[run.method]
    return [(int(r[key]), float(r["eval_greedy"])) for r in run.rows if "eval_greedy" in r and key in r]


def iterations_to(run: RunMetrics, target: float) -> int | None:
    """The first generation / step (>= 1) whose held-out greedy accuracy reaches target; None if none does."""
    return next((i for i, acc in _curve(run) if i >= 1 and acc >= target), None)


def run_projection(runs: dict[str, RunMetrics], bandwidth: float, target: float | None = None) -> Projection:
    """The latency model on the runs' measured costs; iteration counts from their held-out curves."""
    essa, essa_notes = essa_costs(runs["essa"])
    grad, grad_notes = grpo_costs(runs["grpo"])
    curves = {m: _curve(r) for m, r in runs.items()}
    best = [max((acc for i, acc in c if i >= 1), default=None) for c in curves.values()]
    if target is None and None not in best:
        target = min(best)  # the best accuracy both runs reach
    k_essa = iterations_to(runs["essa"], target) if target is not None else None
    k_grad = iterations_to(runs["grpo"], target) if target is not None else None
    notes: dict[str, Any] = {"essa": essa_notes, "grpo": grad_notes, "target_greedy": target}
    if k_essa is None or k_grad is None:
        notes["gap"] = "no iteration count to the target for both runs: per-iteration figures only"
        k_essa = k_grad = None
    notes["iterations_to_target"] = {"essa": k_essa, "grpo": k_grad}
    per_sequence = "minibatch" in runs["essa"].settings
    return Projection(grad, essa, bandwidth, k_grad, k_essa, notes, per_sequence=per_sequence)


def run_summary(p: Projection) -> dict[str, Any]:
    """A run projection's figures for a JSON line."""
    return {**summary(p), "inputs": p.notes}
