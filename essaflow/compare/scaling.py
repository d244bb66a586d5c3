"""The report's scaling section: ESSA-v3's latency model (arXiv 2507.04453 App. B; docs/scaling.md) with the
paper's settings, and with the costs this comparison measured. A projection, labelled as one everywhere."""

from __future__ import annotations

from typing import Any

from essaflow.projection import ProjectionError, table
from essaflow.projection.measured import RunMetrics, run_projection, run_summary
from essaflow.projection.paper import PaperSettings, paper_projection, paper_summary

LABEL = "projection: ESSA-v3 App. B latency model, not a measurement"


def compare_projection(
    essa: RunMetrics | None, grpo: RunMetrics | None, bandwidth_gbs: float, gpus: list[int]
) -> dict[str, Any]:
    """{label, paper: speed-ups at 16/128 with the paper's settings and its reported ones, run: the same from the
    measured costs (or the reason it could not be projected), tables: plain-text tables for the report}."""
    bandwidth = bandwidth_gbs * 1e9
    settings = PaperSettings(bandwidth=bandwidth)
    out: dict[str, Any] = {"label": LABEL, "paper": paper_summary(settings)}
    tables = {"paper": table(paper_projection(settings), gpus, "ESSA-v3 Fig. 3 settings (Qwen2.5-32B, H100)")}
    if essa is None or grpo is None:
        out["run"] = {"gap": "needs an ESSA and a GRPO-family method in the comparison"}
    else:
        try:
            p = run_projection({"essa": essa, "grpo": grpo}, bandwidth)
            out["run"] = run_summary(p)
            tables["run"] = table(p, gpus, "this comparison's measured costs")
        except ProjectionError as err:
            out["run"] = {"gap": str(err)}
    out["tables"] = tables
    return out
