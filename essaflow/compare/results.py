"""What a comparison measured, per run and per method, and the sentences it supports (docs/compare.md).

Everything here is arithmetic on stored results: per-problem correct counts (pass@k for every k), the trainers'
metric rows (time-to-accuracy curves), and the training summaries. No claim is hard-coded: each one is computed
from the runs, with its spread, and says "not measured" when the methods it needs were not in the comparison.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from essaflow.gate.config import GateConfig
from essaflow.gate.decision import decide
from essaflow.gate.evidence import GateEvidence
from essaflow.judging.evaluation import EvalReport

#: pass@k values the JSON line and the tables carry (those <= n)
HEADLINE_KS = (1, 4, 16, 64, 256)


def pass_at_k_curve(correct_counts: list[int], n: int) -> list[float]:
    """Mean unbiased pass@k over problems for k = 1..n (Chen et al. 2021; judging.evaluation.pass_at_k), at once
    for every k: pass@k = 1 - prod_{i=n-c+1}^{n} (1 - k / i), one vector product per distinct count c."""
    ks = np.arange(1, n + 1, dtype=np.float64)
    total = np.zeros(n)
    counts = np.bincount(np.asarray(correct_counts, dtype=np.int64), minlength=n + 1)
    for c in np.nonzero(counts)[0]:
        i = np.arange(n - c + 1, n + 1, dtype=np.float64)[:, None]
        total += counts[c] * (1.0 - np.prod(1.0 - ks[None, :] / i, axis=0))
    return (total / max(len(correct_counts), 1)).tolist()


def accuracy_curve(rows: list[dict[str, Any]], start_greedy: float) -> list[dict[str, float]]:
    """Held-out greedy accuracy against training wall seconds and generated tokens, from the trainer's rows (ESSA
    generations: wall_s, generated_tokens; GRPO steps: wall_s_mean, gen_tokens), starting at the SFT start."""
    points = [{"train_s": 0.0, "generated_tokens": 0.0, "greedy": start_greedy}]
    wall = tokens = 0.0
    for r in rows:
        wall += float(r.get("wall_s_mean", r.get("wall_s", 0.0)) or 0.0)
        tokens += float(r.get("gen_tokens", r.get("generated_tokens", 0)) or 0)
        if r.get("eval_greedy") is not None and ("fitness_mean" in r or "reward_mean" in r):
            points.append({"train_s": round(wall, 3), "generated_tokens": tokens, "greedy": float(r["eval_greedy"])})
    return points


@dataclass
class ArmResult:
    """One method with one seed, as measured."""

    method: str
    """The method's name in the compare config."""
    label: str
    """The variant as results show it, e.g. ESSA(es, accuracy) or F-GRPO(gamma=0.5)."""
    seed: int
    summary: dict[str, float]
    """greedy and pass@k at the eval protocol's ks."""
    pass_curve: list[float]
    """pass@k for k = 1..n."""
    train_wall_s: float
    steps: int
    """Generations (ESSA) or steps (GRPO) run within the budget."""
    usage: dict[str, float]
    """generated_tokens, forward_tokens, backward_tokens, device_s."""
    bytes_per_update: float
    """Bytes that crossed process boundaries per generation/step, as measured (0 for a one-process GRPO run)."""
    curve: list[dict[str, float]]
    """accuracy_curve points."""
    allreduce_bytes: float = 0.0
    """GRPO: the gradient payload each worker all-reduces per step once workers >= 2 (trainable bytes x
    mini-batches), what a one-worker run does not send; 0 for ESSA."""
    fitness_kind: str = ""
    mlflow_run_id: str = ""
    run_id: str = ""
    problem_ids: list[str] = field(default_factory=list, repr=False)
    """The held-out problems, in the order of the per-problem lists below."""
    correct_counts: list[int] = field(default_factory=list, repr=False)
    """Correct completions out of n per problem (what the promotion gate pairs)."""
    greedy_correct: list[int] = field(default_factory=list, repr=False)
    """1 where the greedy decode was correct, per problem."""

    def report(self) -> EvalReport:
        """The per-problem outcomes as an evaluation report (for the promotion gate)."""
        n = len(self.pass_curve)
        return EvalReport(len(self.problem_ids), n, self.summary["greedy"], {}, self.correct_counts,
                          self.problem_ids, greedy_correct=self.greedy_correct)  # fmt: skip

    def headline(self) -> dict[str, float]:
        """pass@k at HEADLINE_KS (<= n) and greedy."""
        out = {f"pass@{k}": round(self.pass_curve[k - 1], 4) for k in HEADLINE_KS if k <= len(self.pass_curve)}
        return {**out, "greedy": round(self.summary["greedy"], 4)}

    def row(self) -> dict[str, Any]:
        """What the JSON line carries of this run."""
        return {
            "method": self.method,
            "label": self.label,
            "seed": self.seed,
            **self.headline(),
            "train_wall_s": round(self.train_wall_s, 2),
            "steps": self.steps,
            "generated_tokens": int(self.usage.get("generated_tokens", 0)),
            "forward_tokens": int(self.usage.get("forward_tokens", 0)),
            "backward_tokens": int(self.usage.get("backward_tokens", 0)),
            "device_s": round(float(self.usage.get("device_s", 0.0)), 2),
            "bytes_per_update": round(self.bytes_per_update, 1),
            "allreduce_bytes": round(self.allreduce_bytes, 1),
            "mlflow_run_id": self.mlflow_run_id,
        }


def spread(values: list[float]) -> dict[str, float]:
    """mean, sample std (0 for one value), min, max and the count."""
    vals = [float(v) for v in values]
    std = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return {"mean": round(statistics.fmean(vals), 4), "std": round(std, 4), "min": min(vals), "max": max(vals),
            "n": len(vals)}  # fmt: skip


def by_method(arms: list[ArmResult]) -> dict[str, list[ArmResult]]:
    out: dict[str, list[ArmResult]] = {}
    for a in arms:
        out.setdefault(a.method, []).append(a)
    return out


def method_table(arms: list[ArmResult]) -> dict[str, dict[str, Any]]:
    """Per method: its label and the spread over seeds of every headline number and cost."""
    out: dict[str, dict[str, Any]] = {}
    for method, runs in by_method(arms).items():
        rows = [r.row() for r in runs]
        keys = [k for k, v in rows[0].items() if isinstance(v, int | float) and k != "seed"]
        out[method] = {"label": runs[0].label, **{k: spread([r[k] for r in rows]) for k in keys}}
    return out


@dataclass
class Paired:
    """Method a against method b on one metric, seed by seed (the same seeds, the same SFT start)."""

    a: str
    b: str
    metric: str
    mean_diff: float
    std_diff: float
    seeds_higher: int
    """Seeds where a beat b."""
    seeds: int
    seeds_equal: int = 0
    """Seeds where a and b tied (pass@k on a finite eval split is often a tie at large k)."""

    def sentence(self, unit: float = 100.0) -> str:
        if self.mean_diff == 0:
            head = f"{self.a} {self.metric} equals {self.b}'s on average"
        else:
            sign = "higher" if self.mean_diff > 0 else "lower"
            head = f"{self.a} {self.metric} is {sign} than {self.b}'s by {abs(self.mean_diff) * unit:.2f} points"
        wins = f"higher on {self.seeds_higher}/{self.seeds} seeds"
        wins += f", equal on {self.seeds_equal}" if self.seeds_equal else ""
        return f"{head} (mean over seeds; sd {self.std_diff * unit:.2f}; {wins})"


def paired(arms: list[ArmResult], a: str, b: str, metric: str, baseline: dict[str, float] | None = None) -> Paired:
    """a - b on `metric` per seed; b may be the SFT start (`baseline`, the same for every seed)."""
    seeds = {name: {r.seed: r.headline()[metric] for r in runs} for name, runs in by_method(arms).items()}
    runs_a = seeds.get(a, {})
    runs_b = seeds.get(b, {}) if baseline is None else {}
    diffs = [v - (baseline[metric] if baseline is not None else runs_b[s]) for s, v in runs_a.items()
             if baseline is not None or s in runs_b]  # fmt: skip
    s = spread(diffs)
    return Paired(a, b, metric, s["mean"], s["std"], sum(d > 0 for d in diffs), len(diffs), sum(d == 0 for d in diffs))


@dataclass
class Claim:
    """One paper claim checked on this task: what was compared and what the runs say."""

    claim: str
    """The paper's claim, with its arXiv id."""
    checked: str
    """What was compared here."""
    finding: str
    """What the runs say (or why it could not be measured)."""
    numbers: dict[str, Any] = field(default_factory=dict)


def plain_grpo(arms: list[ArmResult]) -> str | None:
    """The first method run as plain GRPO (fgrpo with gamma 0 and the grpo loss), the claims' reference."""
    return next((a.method for a in arms if a.label == "GRPO"), None)


def claims(arms: list[ArmResult], sft: dict[str, float], n: int) -> list[Claim]:
    """The papers' three claims on this task (docs/compare.md): GRPO lowers pass@n below the SFT start? F-GRPO keeps
    pass@n above GRPO's? ESSA matches GRPO's pass@1?"""
    first = {m: runs[0] for m, runs in by_method(arms).items()}
    top = f"pass@{max(k for k in HEADLINE_KS if k <= n)}"
    grpo = plain_grpo(arms)
    essa = [m for m, r in first.items() if r.label.startswith("ESSA")]
    focal = [m for m, r in first.items() if r.label.startswith("F-")]
    out: list[Claim] = []
    if grpo is None:
        missing = "no plain GRPO method (fgrpo with grpo.gamma=0) in the comparison: not measured"
        out.append(Claim("GRPO narrows solutions (arXiv 2602.06717 sec. 1)", f"GRPO {top} vs SFT start", missing))
    else:
        p = paired(arms, grpo, "sft", top, sft)
        out.append(Claim("GRPO narrows solutions: pass@k at large k falls (arXiv 2602.06717 sec. 1)",
                         f"{grpo} {top} vs the SFT start ({sft.get(top, float('nan')):.4f})",
                         p.sentence().replace("sft's", "the SFT start's"), asdict(p)))  # fmt: skip
    for m in focal:
        if grpo is None:
            break
        p = paired(arms, m, grpo, top)
        out.append(Claim("F-GRPO keeps pass@k at large k above GRPO's (arXiv 2602.06717 Table 1)",
                         f"{m} ({first[m].label}) {top} vs {grpo}", p.sentence(), asdict(p)))  # fmt: skip
    for m in essa:
        if grpo is None:
            break
        p = paired(arms, m, grpo, "pass@1")
        out.append(Claim("ESSA reaches GRPO's quality from inference alone (arXiv 2507.04453 sec. 4)",
                         f"{m} ({first[m].label}) pass@1 vs {grpo}", p.sentence(), asdict(p)))  # fmt: skip
    return out


def gate_evidence(
    arms: list[ArmResult], sft: EvalReport, ks: list[int], cfg: GateConfig, protocol: str
) -> dict[str, list[GateEvidence]]:
    """The promotion gate (essaflow/gate/decision.py) on `cfg.metric` per method and seed: each run as the
    challenger, the SFT start as the champion, paired on the same held-out problems under the same protocol."""
    problems = hashlib.sha256("\n".join(sorted(sft.problem_ids)).encode()).hexdigest()[:16]
    return {method: [decide(r.report(), sft, ks, cfg, protocol, problems, "sft", "the SFT start")
                     for r in runs] for method, runs in by_method(arms).items()}  # fmt: skip


def gate_verdicts(evidence: dict[str, list[GateEvidence]], arms: list[ArmResult]) -> dict[str, str]:
    """Per method: "would promote" (every seed a paired win), "would not promote" (none) or "mixed", with each
    seed's paired difference and interval."""
    out = {}
    for method, runs in by_method(arms).items():
        ev = evidence[method]
        wins = sum(e.promotes for e in ev)
        verdict = "would promote" if wins == len(ev) else "would not promote" if not wins else "mixed"
        e0 = ev[0]
        mean = statistics.fmean(e.challenger for e in ev)
        seeds = "; ".join(f"seed {r.seed}: {e.diff:+.4f} [{e.ci_low:+.4f}, {e.ci_high:+.4f}] {e.verdict}"
                          for r, e in zip(runs, ev))  # fmt: skip
        out[method] = (
            f"{verdict}: {e0.metric} {mean:.4f} (mean of {len(ev)}) vs SFT start {e0.champion:.4f} on "
            f"{e0.n_problems} problems; a paired win on {wins}/{len(ev)} seeds (gain >= {e0.min_delta:g}, "
            f"{e0.confidence:g} interval above 0, guards; {seeds})"
        )
    return out
