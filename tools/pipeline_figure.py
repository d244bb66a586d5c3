"""Draw docs/pipeline.png, the README's picture: the finetune flow's stages and the services they use.

Run `.venv/bin/python tools/pipeline_figure.py` after the pipeline's stages change (flows/finetune.py).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "docs" / "pipeline.png"
#: (label, colour) of each stage, in the flow's order: two rows, the second read right to left
STAGES = [
    ("prepare dataset\n(content-addressed)", "#dbe9f6"),
    ("pass@k of\nthe base", "#e8e8e8"),
    ("SFT: LoRA\nwarm start", "#dbe9f6"),
    ("pass@k of\nthe SFT start", "#e8e8e8"),
    ("ESSA or F-GRPO\non Ray (checkpointed)", "#fde2c4"),
    ("pass@k of\nthe tuned model", "#e8e8e8"),
    ("the champion, scored\non the same problems", "#e8e8e8"),
    ("promotion gate:\npaired win -> champion", "#d5f0d5"),
]
SERVICES = (
    "Prefect runs the flow  |  artifacts in S3-compatible storage (or file://)  |  MLflow: runs, metrics, registry"
)


def box(ax, x: float, y: float, text: str, colour: str) -> None:
    ax.add_patch(FancyBboxPatch((x - 0.9, y - 0.42), 1.8, 0.84, boxstyle="round,pad=0.05", fc=colour, ec="#555555"))
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def arrow(ax, start: tuple[float, float], end: tuple[float, float]) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "->", "color": "#333333", "lw": 1.3})


def main() -> None:
    fig, ax = plt.subplots(figsize=(10, 3.6))
    ax.set_xlim(-0.2, 10.2)
    ax.set_ylim(-0.2, 3.4)
    ax.axis("off")
    xs = [1.2, 3.8, 6.4, 9.0]
    places = [(x, 2.5) for x in xs] + [(x, 1.0) for x in reversed(xs)]
    for (label, colour), (x, y) in zip(STAGES, places):
        box(ax, x, y, label, colour)
    for (x0, y0), (x1, y1) in zip(places, places[1:]):
        if y0 == y1:
            step = 0.95 if x1 > x0 else -0.95
            arrow(ax, (x0 + step, y0), (x1 - step, y1))
        else:
            arrow(ax, (x0, y0 - 0.47), (x1, y1 + 0.47))
    ax.text(5.1, 0.05, SERVICES, ha="center", va="center", fontsize=8.5, color="#444444")
    ax.set_title("essaflow's finetune flow (flows/finetune.py)", fontsize=11)
    fig.tight_layout()
    fig.savefig(OUT, dpi=110)
    print(OUT)


if __name__ == "__main__":
    main()
