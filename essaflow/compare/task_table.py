"""The task x method table: what each method gained over the SFT start on one task, with paired intervals.

One row per method (and one for the SFT start): held-out greedy and pass@1 with the gain over the start and its
paired 95% bootstrap interval, pass@k at the largest k, training wall, generated tokens, bytes per update, greedy at
equal generated tokens, and the promotion gate's verdict. Rows of several comparisons (one per task) stack into one
table (`essaflow compare-table`, docs/compare.md).

The interval pools the seeds: per problem, the mean over seeds of (run - start), then the problems resampled with
replacement (essaflow/gate/paired.py's percentile bootstrap). It answers "did this method, as run with these seeds,
move this task's held-out problems", the question a user asks of a table; the per-seed intervals stay in the gate's
evidence.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import numpy as np

from essaflow.compare.results import ArmResult, by_method, pass_at_k_curve
from essaflow.gate.config import GateConfig
from essaflow.gate.evidence import GateEvidence
from essaflow.gate.paired import bootstrap_interval, per_problem
from essaflow.judging.evaluation import EvalReport

METRICS = ("greedy", "pass@1")
"""The metrics shown with their paired gain over the start."""


def pooled_gain(runs: list[ArmResult], start: EvalReport, metric: str, gate: GateConfig) -> dict[str, float]:
    """The seeds' mean of `metric`, its gain over the start and the gain's paired interval (seeds pooled per problem;
    `gate`'s confidence, resamples and bootstrap seed)."""
    base = per_problem(start, metric)
    ids = sorted(base)
    values = []
    for r in runs:
        own = per_problem(r.report(), metric)
        if set(own) != set(base):
            raise ValueError(f"{r.method} seed {r.seed}: {metric} was judged on other problems than the SFT start")
        values.append([own[i] for i in ids])
    d = np.mean(np.array(values), axis=0) - np.array([base[i] for i in ids])
    lo, hi = bootstrap_interval(d, gate.confidence, gate.bootstrap_resamples, gate.bootstrap_seed)
    start_mean = float(np.mean([base[i] for i in ids]))
    return {"value": round(start_mean + float(d.mean()), 4), "gain": round(float(d.mean()), 4),
            "ci_low": round(lo, 4), "ci_high": round(hi, 4)}  # fmt: skip


def greedy_at_tokens(run: ArmResult, tokens: float) -> float:
    """Held-out greedy at the run's last check within `tokens` generated tokens: its curve (the SFT start's at 0,
    then the trainer's checks), closed by the final evaluation at the run's whole token count."""
    total = float(run.usage.get("generated_tokens", 0))
    points = [*run.curve, {"generated_tokens": total, "greedy": run.summary["greedy"]}]
    within = [(p["generated_tokens"], i, p["greedy"]) for i, p in enumerate(points) if p["generated_tokens"] <= tokens]
    return max(within)[2]  # the latest such point; at a tie of tokens, the final evaluation


def task_rows(
    task: str,
    arms: list[ArmResult],
    start: EvalReport,
    sft: dict[str, float],
    evidence: dict[str, list[GateEvidence]],
    gate: GateConfig,
) -> list[dict[str, Any]]:
    """The start's row, then one row per method (means over seeds). `sft`: the start's greedy and pass@1."""
    top = f"pass@{start.samples_per_problem}"
    start_top = pass_at_k_curve(start.correct_counts, start.samples_per_problem)[-1]
    groups = by_method(arms)
    # equal tokens: the least any method generated in its budget (mean over its seeds)
    tokens = min(statistics.fmean(r.usage.get("generated_tokens", 0) for r in runs) for runs in groups.values())
    start_row = {
        "task": task,
        "method": "SFT start",
        "label": "SFT start",
        top: round(start_top, 4),
        **{m: {"value": round(sft[m], 4)} for m in METRICS},
        "equal_tokens_greedy": round(sft["greedy"], 4),
    }
    rows: list[dict[str, Any]] = [start_row]
    for method, runs in groups.items():
        ev = evidence[method]
        wins = sum(e.promotes for e in ev)
        verdict = "would promote" if wins == len(ev) else "would not promote" if not wins else "mixed"
        rows.append({
            "task": task, "method": method, "label": runs[0].label, "seeds": len(runs),
            **{m: pooled_gain(runs, start, m, gate) for m in METRICS},
            top: round(statistics.fmean(r.pass_curve[-1] for r in runs), 4),
            "train_wall_s": round(statistics.fmean(r.train_wall_s for r in runs), 1),
            "steps": [r.steps for r in runs],
            "generated_tokens": round(statistics.fmean(r.usage.get("generated_tokens", 0) for r in runs)),
            "bytes_per_update": round(statistics.fmean(r.bytes_per_update for r in runs), 1),
            "equal_tokens": round(tokens),
            "equal_tokens_greedy": round(statistics.fmean(greedy_at_tokens(r, tokens) for r in runs), 4),
            "gate": f"{verdict} ({wins}/{len(ev)} seeds)",
        })  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The table for rows of one or several comparisons (each row's own task and largest k)."""
    head = ["task", "method", "greedy (gain [95% CI])", "pass@1 (gain [95% CI])", "pass@n", "train s", "steps",
            "generated tokens", "greedy at equal tokens", "bytes / update", "gate"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        top = next(k for k in r if k.startswith("pass@") and k != "pass@1")
        if r["method"] == "SFT start":
            cells = [r["task"], "SFT start", f"{r['greedy']['value']:.3f}", f"{r['pass@1']['value']:.3f}",
                     f"{r[top]:.3f} ({top})", "", "", "", f"{r['equal_tokens_greedy']:.3f}", "", ""]  # fmt: skip
        else:
            cells = [r["task"], r["label"], _gain(r["greedy"]), _gain(r["pass@1"]), f"{r[top]:.3f} ({top})",
                     f"{r['train_wall_s']:.0f}", "-".join(map(str, sorted({min(r['steps']), max(r['steps'])}))),
                     f"{r['generated_tokens']:,}", f"{r['equal_tokens_greedy']:.3f} ({r['equal_tokens']:,})",
                     f"{r['bytes_per_update']:,.0f}", r["gate"]]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _gain(cell: dict[str, float]) -> str:
    """value (gain [low, high]), the gain and interval in points."""
    gain, lo, hi = (cell[k] * 100 for k in ("gain", "ci_low", "ci_high"))
    return f"{cell['value']:.3f} ({gain:+.1f} [{lo:+.1f}, {hi:+.1f}])"


#: what `markdown` reads of a row: the SFT start's, and a method's on top of the start's keys
_START_KEYS = ("task", "method", "greedy", "pass@1", "equal_tokens_greedy")
_METHOD_KEYS = ("label", "train_wall_s", "steps", "generated_tokens", "equal_tokens", "bytes_per_update", "gate")
_FIX = "give the comparison.json of `essaflow compare` (or its report folder)"


def report_rows(body: Any) -> list[dict[str, Any]]:
    """The task_table rows of a comparison.json's parsed `body`, each checked for what :func:`markdown` reads; a
    ValueError saying what is wrong with the file (not a report, a report without the table, an empty table, a
    row by its number and field) otherwise."""
    if not isinstance(body, dict):
        raise _not_a_report(f"a JSON {type(body).__name__}, not an object with task_table")
    if "task_table" not in body:
        if {"compare", "runs"} <= set(body):
            raise ValueError("no task_table in this comparison.json (a report written before the table existed); "
                             "run the comparison again")  # fmt: skip
        keys = ", ".join(map(str, list(body)[:8])) + (", ..." if len(body) > 8 else "")
        raise _not_a_report(f"no task_table ({f'its keys: {keys}' if body else 'an empty object'})")
    rows = body["task_table"]
    if not isinstance(rows, list):
        raise _not_a_report(f"task_table is a JSON {type(rows).__name__}, not a list of rows")
    if not rows:
        raise ValueError("task_table is empty: the comparison recorded no rows; run the comparison again")
    for i, row in enumerate(rows, 1):
        problem = _row_problem(row)
        if problem:
            raise ValueError(f"task_table row {i}: {problem}")
    return rows


def _not_a_report(why: str) -> ValueError:
    return ValueError(f"not a comparison report: {why}; {_FIX}")


def _row_problem(row: Any) -> str | None:
    """What :func:`markdown` cannot read in one row: its type, a missing key, a value of the wrong kind."""
    if not isinstance(row, dict):
        return f"is a JSON {type(row).__name__}, not an object"
    keys = _START_KEYS + (() if row.get("method") == "SFT start" else _METHOD_KEYS)
    missing = [k for k in keys if k not in row]
    if not any(isinstance(k, str) and k.startswith("pass@") and k != "pass@1" for k in row):
        missing.append("pass@<n>")
    if missing:
        return f"lacks {', '.join(missing)}"
    steps = row.get("steps", [0])
    if not (isinstance(steps, list) and steps and all(isinstance(n, int) for n in steps)):
        return f"steps is {json.dumps(steps)[:40]}, not a list of each seed's steps"
    try:
        markdown([row])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
        what = f"no {err}" if isinstance(err, KeyError) else str(err)
        return f"a value of the wrong kind ({type(err).__name__}: {what})"
    return None
