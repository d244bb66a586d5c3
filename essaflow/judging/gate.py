"""The promotion gate: does a challenger beat the champion by more than noise, on the same problems and protocol?

Both models are scored per problem on one problem set under one protocol (`protocol_digest`, `problems_digest`).
The rule (docs/compare.md, "The promotion gate"):

1. the paired difference on `promotion_metric` (per problem: the unbiased pass@k estimate from its correct count,
   or greedy's 0/1), averaged over problems, is at least `registry.min_delta`;
2. its paired bootstrap interval at `registry.confidence` (problems resampled with replacement, both models'
   outcomes kept together) lies above 0, so the gain is not what resampling the problems gives by chance;
3. no guard metric (greedy, and pass@k at the largest k) drops by more than `registry.guard_max_drop`.

Rules 1 and 3 compare aggregate values and go through MLflow's model validation (`MetricThreshold`,
`mlflow.validate_evaluation_results`); rule 2 needs per-problem outcomes, which that API does not take.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig, GateConfig
from essaflow.judging.evaluation import EvalReport, pass_at_k

PROMOTE, KEEP = "promote", "keep"


class GateError(ValueError):
    """The two evaluations cannot be paired (different problems, or no problems at all)."""


def protocol_digest(eval_cfg: EvalConfig, sampling: Any) -> str:
    """Digest of what decides a problem's outcomes: n, the sampling seed and its stream (eval.shared_prompt), the
    reward (its name or function, the digest of its source, the correctness threshold, the sandbox of a reward that
    runs code: a reward file moved elsewhere is the same protocol, one edited is not) and the sampling settings that
    change completions (temperature, top_p, max_new_tokens); not ks (read off the counts) nor saved samples."""
    body = {
        "samples_per_problem": eval_cfg.samples_per_problem,
        "seed": eval_cfg.seed,
        "shared_prompt": eval_cfg.shared_prompt,
        **eval_cfg.judged_with(),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def problems_digest(problems: Sequence[Problem]) -> str:
    """Digest of the judged problems (id, prompt, reference answer), independent of their order."""
    rows = sorted(json.dumps([p.id, p.prompt, p.answer], ensure_ascii=False) for p in problems)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


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


@dataclass
class GateEvidence:
    """What the gate decided and why: the numbers that go to the version's tags, an artifact and the summary."""

    verdict: str
    """promote or keep."""
    reason: str
    metric: str
    challenger: float
    champion: float | None
    """None when there was no champion to compare with."""
    diff: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    min_delta: float
    n_problems: int
    protocol_digest: str
    problems_digest: str
    champion_version: str | None = None
    champion_scored: str = "none"
    """How the champion's outcomes were obtained: re-evaluated, stored counts, or none (no champion)."""
    guards: dict[str, dict[str, float | bool]] = field(default_factory=dict)
    """Per guard metric: challenger, champion, diff, ci_low, ci_high, max_drop, ok."""

    @property
    def promotes(self) -> bool:
        return self.verdict == PROMOTE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def tags(self) -> dict[str, str]:
        """Model version tags, `essaflow.gate_*` (numbers rounded to 4 places; guards as JSON)."""
        body = {k: v for k, v in self.to_dict().items() if k != "guards"}
        out = {f"essaflow.gate_{k}": "" if v is None else str(round(v, 4) if isinstance(v, float) else v)
               for k, v in body.items()}  # fmt: skip
        out["essaflow.gate_guards"] = json.dumps(_rounded(self.guards), sort_keys=True)
        return out

    def markdown(self, name: str, version: str) -> str:
        """The Prefect summary: the verdict, both scores, the paired difference and its interval, the guards."""
        pct = self.confidence * 100
        lines = [f"# Promotion gate: {name} v{version}", "", f"**{self.verdict}**: {self.reason}", "",
                 "| metric | challenger | champion | paired diff | interval | rule |", "|---|" * 6]  # fmt: skip
        if self.champion is None:
            lines.append(f"| {self.metric} | {self.challenger:.4f} | none | | | first version |")
        else:
            lines.append(f"| {self.metric} | {self.challenger:.4f} | {self.champion:.4f} | {self.diff:+.4f} | "
                         f"[{self.ci_low:+.4f}, {self.ci_high:+.4f}] ({pct:g}%) | >= {self.min_delta:g}, "
                         "interval above 0 |")  # fmt: skip
        for g, v in self.guards.items():
            lines.append(f"| {g} (guard) | {v['challenger']:.4f} | {v['champion']:.4f} | {v['diff']:+.4f} | "
                         f"[{v['ci_low']:+.4f}, {v['ci_high']:+.4f}] | drop <= {v['max_drop']:g}: "
                         f"{'ok' if v['ok'] else 'BLOCKS'} |")  # fmt: skip
        champ = f"v{self.champion_version} ({self.champion_scored})" if self.champion_version else "none"
        lines += ["", f"Champion: {champ}; {self.n_problems} problems; protocol `{self.protocol_digest}`, "
                  f"problems `{self.problems_digest}`."]  # fmt: skip
        return "\n".join(lines) + "\n"


def _rounded(guards: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {g: {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()} for g, row in guards.items()}


def first_version(challenger: EvalReport, metric: str, protocol: str, problems: str) -> GateEvidence:
    """The evidence when there is no champion yet: the version promotes unconditionally."""
    return GateEvidence(
        PROMOTE, "no champion yet", metric, _score(challenger, metric), None, None, None, None, 0.0, 0.0,
        challenger.num_problems, protocol, problems,
    )  # fmt: skip


def _score(report: EvalReport, metric: str) -> float:
    return report.greedy if metric == "greedy" else report.pass_at_k[metric.removeprefix("pass@")]


def decide(
    challenger: EvalReport,
    champion: EvalReport,
    metric: str,
    ks: Sequence[int],
    cfg: GateConfig,
    protocol: str,
    problems: str,
    champion_version: str | None = None,
    champion_scored: str = "re-evaluated",
) -> GateEvidence:
    """The paired verdict of `challenger` against `champion`, both scored on the same problems and protocol."""
    rs = (cfg.confidence, cfg.bootstrap_resamples, cfg.bootstrap_seed)
    main = paired_diff(challenger, champion, metric, *rs)
    guards = {g: paired_diff(challenger, champion, g, *rs) for g in cfg.guards(ks, metric)}
    failures = _validate_with_mlflow(main, guards, cfg)
    if main.ci_low <= 0:
        failures.insert(0, f"the {cfg.confidence:g} paired interval [{main.ci_low:+.4f}, {main.ci_high:+.4f}] "
                           "does not lie above 0 (within noise)")  # fmt: skip
    verdict = KEEP if failures else PROMOTE
    reason = "; ".join(failures) if failures else (
        f"{metric} {main.diff:+.4f} over {main.n_problems} problems, {cfg.confidence:g} interval "
        f"[{main.ci_low:+.4f}, {main.ci_high:+.4f}] above 0, gain >= {cfg.min_delta:g}, no guard drop")  # fmt: skip
    return GateEvidence(
        verdict, reason, metric, main.challenger, main.champion, main.diff, main.ci_low, main.ci_high,
        cfg.confidence, cfg.min_delta, main.n_problems, protocol, problems, champion_version, champion_scored,
        {g: {"challenger": p.challenger, "champion": p.champion, "diff": p.diff, "ci_low": p.ci_low,
             "ci_high": p.ci_high, "max_drop": cfg.guard_max_drop, "ok": p.diff >= -cfg.guard_max_drop}
         for g, p in guards.items()},
    )  # fmt: skip


def _validate_with_mlflow(main: PairedDiff, guards: dict[str, PairedDiff], cfg: GateConfig) -> list[str]:
    """Rules 1 and 3 as MLflow model validation thresholds on the paired means; the failures, in words."""
    from mlflow import validate_evaluation_results
    from mlflow.models import EvaluationResult, MetricThreshold
    from mlflow.models.evaluation.validation import ModelValidationFailedException

    thresholds, failures = {}, []
    if cfg.min_delta > 0:  # MLflow requires a positive minimum change
        thresholds[main.metric] = MetricThreshold(min_absolute_change=cfg.min_delta, greater_is_better=True)
    elif main.diff < 0:
        failures.append(f"{main.metric} fell by {-main.diff:.4f}")
    for g, p in guards.items():  # champion - max_drop is an absolute floor for the challenger
        thresholds[g] = MetricThreshold(threshold=p.champion - cfg.guard_max_drop - 1e-12, greater_is_better=True)
    candidate = EvaluationResult({main.metric: main.challenger, **{g: p.challenger for g, p in guards.items()}}, {})
    baseline = EvaluationResult({main.metric: main.champion, **{g: p.champion for g, p in guards.items()}}, {})
    try:
        validate_evaluation_results(thresholds, candidate, baseline)
    except ModelValidationFailedException as err:
        found = []
        if cfg.min_delta > 0 and main.diff < cfg.min_delta:
            found.append(f"{main.metric} gain {main.diff:+.4f} is below registry.min_delta={cfg.min_delta:g}")
        found += [f"guard {g} drops {-p.diff:.4f} > registry.guard_max_drop={cfg.guard_max_drop:g}"
                  for g, p in guards.items() if p.diff < -cfg.guard_max_drop]  # fmt: skip
        failures += found or [" ".join(str(err.message).split())]  # a boundary case MLflow's Decimal check decides
    return failures
