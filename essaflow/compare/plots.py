"""The report's figures (PNG, matplotlib's Agg backend): pass@k for k = 1..n, time-to-accuracy, bytes per update."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from essaflow.compare.results import ArmResult, by_method


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colours(methods: list[str]) -> dict[str, str]:
    return {m: f"C{i % 10}" for i, m in enumerate(methods)}


def plot_pass_curves(arms: list[ArmResult], sft_curve: list[float], out: Path) -> Path:
    """pass@k against k (log2 axis) per method: the mean over seeds, the band from the lowest to the highest seed;
    the SFT start dashed."""
    plt = _pyplot()
    groups = by_method(arms)
    colour = _colours(list(groups))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ks = np.arange(1, len(sft_curve) + 1)
    ax.plot(ks, sft_curve, "k--", label="SFT start")
    for method, runs in groups.items():
        curves = np.array([r.pass_curve for r in runs])
        ax.plot(ks, curves.mean(0), color=colour[method], label=f"{method}: {runs[0].label} ({len(runs)} seeds)")
        ax.fill_between(ks, curves.min(0), curves.max(0), color=colour[method], alpha=0.2)
    ax.set(xscale="log", xlabel="k", ylabel="pass@k (held-out)", title="pass@k, mean over seeds (band: min-max)")
    ax.set_xscale("log", base=2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(plt, fig, out)


SEED_STYLES = ("-", "--", ":", "-.")


def time_to_accuracy_figure(arms: list[ArmResult]):
    """Held-out greedy accuracy against training wall seconds (left) and against generated tokens (right): one
    line per seed, its points in the order of the panel's axis, the method's colour, a line style per seed."""
    plt = _pyplot()
    groups = by_method(arms)
    colour = _colours(list(groups))
    fig, (by_time, by_tokens) = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for method, runs in groups.items():
        for i, r in enumerate(sorted(runs, key=lambda r: r.seed)):
            style = {"color": colour[method], "linestyle": SEED_STYLES[i % len(SEED_STYLES)], "marker": "."}
            label = f"{method}: {r.label}, seed {r.seed}"
            for ax, x in ((by_time, "train_s"), (by_tokens, "generated_tokens")):
                points = sorted(r.curve, key=lambda p: p[x])
                (line,) = ax.plot(
                    [p[x] for p in points], [p["greedy"] for p in points], alpha=0.8, label=label, **style
                )
                line.set_gid(f"{method}/seed{r.seed}")
    by_time.set(xlabel="training wall seconds", ylabel="held-out greedy accuracy", title="time to accuracy")
    by_tokens.set(xlabel="generated tokens", title="tokens to accuracy")
    for ax in (by_time, by_tokens):
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=6)
    return fig


def plot_time_to_accuracy(arms: list[ArmResult], out: Path) -> Path:
    """time_to_accuracy_figure as a PNG."""
    return _save(_pyplot(), time_to_accuracy_figure(arms), out)


def plot_bytes(arms: list[ArmResult], out: Path) -> Path:
    """Bytes exchanged between processes per update (log axis), median over seeds per method; a one-worker GRPO
    run sends nothing, so its bar is the payload it would all-reduce on two or more workers (hatched)."""
    plt = _pyplot()
    groups = by_method(arms)
    colour = _colours(list(groups))
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    names = list(groups)
    measured = [float(np.median([r.bytes_per_update for r in groups[m]])) for m in names]
    payload = [float(np.median([r.allreduce_bytes for r in groups[m]])) for m in names]
    values = [b if b > 0 else p for b, p in zip(measured, payload)]
    hatches = ["" if b > 0 else "//" for b in measured]
    bars = ax.bar(names, [max(v, 1.0) for v in values], color=[colour[m] for m in names], hatch=hatches)
    for bar, v in zip(bars, values):
        ax.annotate(f"{v:,.0f} B", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    title = "bytes per update (hatched: GRPO's all-reduce at >= 2 workers)"
    ax.set(yscale="log", ylabel="bytes per update", title=title)
    ax.grid(alpha=0.3, axis="y")
    return _save(plt, fig, out)


def _save(plt, fig, out: Path) -> Path:
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
