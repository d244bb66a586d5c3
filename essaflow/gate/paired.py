"""The gate's paired test: challenger minus champion per problem on one metric, and the percentile bootstrap
interval of the mean difference (problems resampled with replacement, both models' outcomes kept together)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from essaflow.judging.evaluation import EvalReport, pass_at_k


class GateError(ValueError):
    """The two evaluations cannot be paired (different problems, or no problems at all)."""


def per_problem(report: EvalReport, metric: str) -> dict[str, float]:
    """{problem id: the problem's own value of `metric`}: greedy's 0/1, or pass@k from its correct count."""
    if metric == "greedy":
        if len(report.greedy_correct) != len(report.problem_ids):
            raise GateError("the evaluation report holds no per-problem greedy outcomes")
        return dict(zip(report.problem_ids, map(float, report.greedy_correct)))
    k = int(metric.removeprefix("pass@"))
    n = report.samples_per_problem
    return {pid: pass_at_k(n, c, k) for pid, c in zip(report.problem_ids, report.correct_counts)}


@dataclass(frozen=True)
class PairedDiff:
    """Challenger minus champion on one metric over the same problems."""

    metric: str
    challenger: float
    champion: float
    diff: float
    ci_low: float
    ci_high: float
    n_problems: int


def paired_diff(
    challenger: EvalReport, champion: EvalReport, metric: str, confidence: float, resamples: int, seed: int
) -> PairedDiff:
    """Mean per-problem difference and its percentile bootstrap interval (problems resampled, pairs kept)."""
    a, b = per_problem(challenger, metric), per_problem(champion, metric)
    if set(a) != set(b):
        only_a, only_b = sorted(set(a) - set(b))[:3], sorted(set(b) - set(a))[:3]
        raise GateError(f"{metric}: the two evaluations judged different problems (challenger only: {only_a}, "
                        f"champion only: {only_b}); both must be scored on one problem set")  # fmt: skip
    if not a:
        raise GateError("no problems to compare on")
    ids = sorted(a)
    x, y = np.array([a[i] for i in ids]), np.array([b[i] for i in ids])
    d = x - y
    lo, hi = bootstrap_interval(d, confidence, resamples, seed)
    return PairedDiff(metric, float(x.mean()), float(y.mean()), float(d.mean()), lo, hi, len(ids))


def bootstrap_interval(d: np.ndarray, confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    """Two-sided percentile bootstrap interval of the mean of per-problem differences `d` (problems resampled)."""
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // len(d))  # bounded memory for large problem sets
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        means[start : start + rows] = d[rng.integers(0, len(d), size=(rows, len(d)))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(lo), float(hi)
