"""The gate's decision: does a challenger beat the champion by more than noise, on the same problems and protocol?

Both models are scored per problem on one problem set under one protocol (essaflow/gate/digests.py). The rule
(docs/compare.md, "The promotion gate"):

1. the paired difference on `gate.metric` (per problem: the unbiased pass@k estimate from its correct count, or
   greedy's 0/1), averaged over problems, is at least `gate.min_delta`;
2. its paired bootstrap interval at `gate.confidence` (problems resampled with replacement, both models' outcomes
   kept together: essaflow/gate/paired.py) lies above 0, so the gain is not what resampling the problems gives by
   chance;
3. no guard metric (greedy, and pass@k at the largest k) drops by more than `gate.guard_max_drop`.

Rules 1 and 3 compare aggregate values and go through MLflow's model validation (`MetricThreshold`,
`mlflow.validate_evaluation_results`); rule 2 needs per-problem outcomes, which that API does not take.
"""

from __future__ import annotations

from collections.abc import Sequence

from essaflow.gate.config import GateConfig
from essaflow.gate.evidence import KEEP, PROMOTE, GateEvidence
from essaflow.gate.paired import PairedDiff, paired_diff
from essaflow.judging.evaluation import EvalReport


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
    ks: Sequence[int],
    cfg: GateConfig,
    protocol: str,
    problems: str,
    champion_version: str | None = None,
    champion_scored: str = "re-evaluated",
) -> GateEvidence:
    """The paired verdict of `challenger` against `champion` on `cfg.metric`, both scored on the same problems and
    protocol (`ks`: eval.ks, what pass@max stands for)."""
    metric, rs = cfg.metric, (cfg.confidence, cfg.bootstrap_resamples, cfg.bootstrap_seed)
    main = paired_diff(challenger, champion, metric, *rs)
    guards = {g: paired_diff(challenger, champion, g, *rs) for g in cfg.guards(ks)}
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
            found.append(f"{main.metric} gain {main.diff:+.4f} is below gate.min_delta={cfg.min_delta:g}")
        found += [f"guard {g} drops {-p.diff:.4f} > gate.guard_max_drop={cfg.guard_max_drop:g}"
                  for g, p in guards.items() if p.diff < -cfg.guard_max_drop]  # fmt: skip
        failures += found or [" ".join(str(err.message).split())]  # a boundary case MLflow's Decimal check decides
    return failures
