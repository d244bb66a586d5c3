"""A run's data, read once: the training source and the held-out one (eval.data), split, with their snapshot."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from essaflow.data.config import DataConfig, HeldOutSourceConfig
from essaflow.data.filters import filter_problems
from essaflow.data.fingerprint import combined_digest
from essaflow.data.sources import LoadedProblems, read_problems
from essaflow.data.splits import Splits, split_problems

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedData:
    """The splits and what was read to make them."""

    splits: Splits
    snapshot: dict[str, Any]
    """{"digest": one digest of all sources, "sources": [{"role", "source", "digest", "files": {uri: version}}]}:
    the run's dataset input (MLflow) and its summary; the digest is `data_snapshot_digest`'s."""
    filtered: dict[str, int] = field(default_factory=dict)
    """Training problems each data filter dropped, by its field (max_prompt_tokens, conflicting_duplicates)."""


def _loaded(cfg: DataConfig, role: str) -> tuple[LoadedProblems, dict[str, Any]]:
    loaded = read_problems(cfg)
    if loaded.dropped:
        shown = "; ".join(why for _, why in loaded.dropped[:10])
        log.warning("dropped %d malformed row(s) from %s: %s", len(loaded.dropped), loaded.source, shown)
    return loaded, {"role": role, **loaded.snapshot.as_dict(), "dropped_rows": len(loaded.dropped)}


def prepare_data(data: DataConfig, held_out: HeldOutSourceConfig | None = None, tokenizer: Any = None) -> PreparedData:
    """Read the sources, filter the training problems (essaflow.data.filters; ``tokenizer`` counts
    data.max_prompt_tokens), split them (essaflow.data.splits) and name the snapshot that was read."""
    train, train_snap = _loaded(data, "training")
    filtered = filter_problems(train.problems, data, tokenizer)
    sources = [train_snap]
    eval_problems = None
    if held_out is not None:
        loaded, eval_snap = _loaded(data.held_out(held_out), "evaluation")
        eval_problems = loaded.problems
        sources.append(eval_snap)
    eval_fraction = data.held_out_fraction()
    splits = split_problems(filtered.problems, data.eval_size, data.sft_fraction, eval_fraction, eval_problems)
    if splits.eval_overlap_dropped:
        log.warning(
            "dropped %d training problem(s) that the held-out source %s also holds",
            splits.eval_overlap_dropped,
            held_out.path if held_out else "",
        )
    digest = combined_digest([s["digest"] for s in sources])
    return PreparedData(splits, {"digest": digest, "sources": sources}, filtered.dropped)


def prepare_splits(data: DataConfig, held_out: HeldOutSourceConfig | None = None) -> Splits:
    """The splits of `prepare_data` for a data config without a token cap (data.max_prompt_tokens needs the model's
    tokenizer: `prepare_data` with essaflow.model.loading.token_cap_tokenizer)."""
    return prepare_data(data, held_out).splits
