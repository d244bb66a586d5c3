"""The comparison report: one markdown page (tables, claims, figures, projection) and the JSON it is built from."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from essaflow.compare import task_table
from essaflow.compare.config import CompareConfig
from essaflow.compare.results import HEADLINE_KS, ArmResult, Claim, method_table
from essaflow.gate.evidence import GateEvidence

FIGURES = {
    "passk.png": "pass@k for k = 1..n per method (mean over seeds, band min-max; SFT start dashed)",
    "time_to_accuracy.png": "held-out greedy accuracy against training wall seconds and generated tokens",
    "bytes.png": "bytes exchanged per generation / step",
}


def _cell(s: dict[str, float], scale: float = 1.0, digits: int = 3) -> str:
    mean, sd, lo, hi = (s[k] * scale for k in ("mean", "std", "min", "max"))
    if s["n"] == 1:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sd:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def _big(s: dict[str, float]) -> str:
    return f"{s['mean']:,.0f}" if s["n"] == 1 else f"{s['mean']:,.0f} ± {s['std']:,.0f}"


def summary_rows(table: dict[str, dict[str, Any]], ks: list[int]) -> list[str]:
    head = ["method", "variant", *[f"pass@{k}" for k in ks], "greedy", "train s", "steps", "generated tokens",
            "fwd tokens", "bwd tokens", "bytes / update"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for method, t in table.items():
        cells = [method, t["label"], *[_cell(t[f"pass@{k}"]) for k in ks], _cell(t["greedy"]),
                 _cell(t["train_wall_s"], digits=1), _cell(t["steps"], digits=0), _big(t["generated_tokens"]),
                 _big(t["forward_tokens"]), _big(t["backward_tokens"]), _bytes(t)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _bytes(t: dict[str, Any]) -> str:
    measured = t["bytes_per_update"]["mean"]
    if measured > 0:
        return f"{measured:,.0f}"
    payload = t["allreduce_bytes"]["mean"]
    return f"0 (one process; {payload:,.0f} all-reduced a worker at >= 2)" if payload else "0"


def per_seed_rows(arms: list[ArmResult], ks: list[int]) -> list[str]:
    head = ["run", "seed", *[f"pass@{k}" for k in ks], "greedy", "train s", "steps", "generated tokens", "MLflow run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for a in arms:
        h = a.headline()
        cells = [a.method, str(a.seed), *[f"{h[f'pass@{k}']:.4f}" for k in ks], f"{h['greedy']:.4f}",
                 f"{a.train_wall_s:.1f}", str(a.steps), f"{int(a.usage.get('generated_tokens', 0)):,}",
                 f"`{a.mlflow_run_id}`"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render(
    cfg: CompareConfig,
    sft: dict[str, float],
    arms: list[ArmResult],
    claims: list[Claim],
    verdicts: dict[str, str],
    projection: dict[str, Any],
    links: dict[str, str],
    table: list[dict[str, Any]],
) -> str:
    """The report page. `links`: figure file name -> where it is (a storage URL or a relative path), and
    "mlflow" -> the parent run's address; `table`: task_table.task_rows."""
    ks = [k for k in HEADLINE_KS if k <= cfg.task.eval.samples_per_problem]
    lines = [
        *_header(cfg, sft, links),
        "## Results",
        "",
        *summary_rows(method_table(arms), ks),
        "",
        *_task_section(cfg, table),
        *_gate_section(cfg, verdicts),
        "## The papers' claims on this task",
        "",
        *[f"- **{c.claim}**: {c.checked}: {c.finding}." for c in claims],
        "",
        "## Figures",
        "",
        *[f"- {desc}: ![{name}]({links.get(name, name)})" for name, desc in FIGURES.items()],
        "",
        *_scaling_section(projection),
        "## Per run",
        "",
        *per_seed_rows(arms, ks),
        "",
        "How each figure was obtained: the variant column names the method as run (ESSA's fitness kind: "
        + "; ".join(sorted({f"{a.method}: {a.fitness_kind}" for a in arms if a.fitness_kind}) or ["none"])
        + "). Deviations from the papers are in those labels and in docs/compare.md.",
    ]
    return "\n".join(lines) + "\n"


def _header(cfg: CompareConfig, sft: dict[str, float], links: dict[str, str]) -> list[str]:
    """The title, the task, the shared SFT start, the budget and the MLflow link."""
    t, n = cfg.task, cfg.task.eval.samples_per_problem
    start = ", ".join(f"{k} {v:.4f}" for k, v in sft.items())
    return [
        f"# Compare `{cfg.name}`: {', '.join(m.name for m in cfg.methods)}",
        "",
        f"Task: {t.data.source} data, model `{t.model.name_or_path}`, {_judged(t.eval.judged_with())}, held-out "
        "pass@k with "
        f"n = {n} samples per problem at temperature {t.sampling.temperature} (unbiased estimator). One SFT start "
        f"for every method: {start}.",
        f"Budget: {cfg.budget_s:g} s of training wall time per run (held-out checks left out), seeds "
        f"{cfg.seeds} (each method's own seed; the SFT start is shared). The figures below are means ± sample sd "
        "[min-max] over seeds. train s is the training call's whole wall time (Ray workers' start and the held-out "
        "checks included); the budget counts the generations' / steps' own time.",
        f"MLflow: {links.get('mlflow', 'parent run')}.",
        "",
    ]


def _task_section(cfg: CompareConfig, table: list[dict[str, Any]]) -> list[str]:
    """The task x method table: gains over the start with paired intervals, costs, equal tokens, the gate."""
    r = cfg.task.gate
    return [
        "## Task x method",
        "",
        "Means over seeds. A gain is in points against the SFT start on the same held-out problems, with its "
        f"paired {r.confidence:g} bootstrap interval (per problem, the seeds' mean difference; problems resampled "
        f"{r.bootstrap_resamples} times). Greedy at equal tokens: each run's held-out greedy at its last check "
        "within the fewest tokens any method generated in its budget (in brackets). Rows of several comparisons "
        "stack with `essaflow compare-table` (docs/compare.md).",
        "",
        *task_table.markdown(table),
        "",
    ]


def _gate_section(cfg: CompareConfig, verdicts: dict[str, str]) -> list[str]:
    """The promotion gate's rule and each method's verdict under it."""
    t = cfg.task
    return [
        "## The promotion gate per method",
        "",
        "The gate's rule (docs/compare.md, 'The promotion gate'), each run against the SFT start on the same "
        f"problems: a mean paired gain on {t.gate.metric} of at least {t.gate.min_delta:g}, its "
        f"{t.gate.confidence:g} paired bootstrap interval above 0, no guard metric "
        f"({', '.join(t.gate.guard_metrics)}) down by more than {t.gate.guard_max_drop:g}.",
        "",
        *[f"- **{m}**: {v}" for m, v in verdicts.items()],
        "",
    ]


def _scaling_section(projection: dict[str, Any]) -> list[str]:
    """The ESSA-v3 App. B projection: the paper's settings, then this comparison's measured costs."""
    paper, run = projection["paper"], projection["run"]
    return [
        f"## Scaling ({projection['label']})",
        "",
        f"- With the paper's settings: ESSA's time-to-accuracy speed-up over GRPO **{paper['speedup_16']}x at 16 "
        f"GPUs, {paper['speedup_128']}x at 128** (paper: {paper['reported']['speedup_16']}x and "
        f"{paper['reported']['speedup_128'][0]}-{paper['reported']['speedup_128'][1]}x).",
        "- With this comparison's measured costs: " + _run_line(run),
        "",
        "```",
        *[projection["tables"][k] for k in ("paper", "run") if k in projection["tables"]],
        "```",
        "",
    ]


def _run_line(run: dict[str, Any]) -> str:
    if "gap" in run and "speedup_16" not in run:
        return f"not projected ({run['gap']})."

    def fmt(v: Any) -> str:
        return "n/a" if v is None else f"{v}x"

    return (
        f"time-to-accuracy speed-up {fmt(run.get('speedup_16'))} at 16 GPUs, {fmt(run.get('speedup_128'))} at 128; "
        f"per iteration {fmt(run.get('iteration_speedup_16'))} and {fmt(run.get('iteration_speedup_128'))}."
    )


def as_json(
    cfg: CompareConfig, sft: dict[str, float], arms: list[ArmResult], claims: list[Claim],
    verdicts: dict[str, str], projection: dict[str, Any], evidence: dict[str, list[GateEvidence]] | None = None,
    table: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The report's data (comparison.json, and the JSON line's body); `gate_evidence`: per method, each seed's
    paired gate evidence against the SFT start; `task_table`: task_table.task_rows."""
    return {
        "compare": cfg.name,
        "budget_s": cfg.budget_s,
        "seeds": cfg.seeds,
        "n": cfg.task.eval.samples_per_problem,
        "sft": sft,
        "runs": [a.row() for a in arms],
        "methods": method_table(arms),
        "gate": verdicts,
        "task_table": table or [],
        "gate_evidence": {m: [e.to_dict() for e in ev] for m, ev in (evidence or {}).items()},
        "claims": [asdict(c) for c in claims],
        "projection": {k: v for k, v in projection.items() if k != "tables"},
    }


def _judged(judged: dict[str, str]) -> str:
    """The reward as the report names it: function, source digest, threshold, and the sandbox of code."""
    digest, threshold = judged["reward_digest"][:12], judged["correct_threshold"]
    out = f"reward `{judged['reward']}` (source `{digest}`, correct at >= {threshold}"
    return out + (f", code run in sandbox: {judged['sandbox']})" if "sandbox" in judged else ")")
