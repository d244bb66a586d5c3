"""Search-strategy helpers for the ESSA tests, through the strategy's public interface only."""

from __future__ import annotations

import numpy as np

from essaflow.essa.strategy import Strategy


def move_mean(strategy: Strategy, by: float) -> None:
    """Move the search mean by `by` (another machine's floats), through the state round trip a checkpoint or a
    resync uses (`state_dict` / `load_state_dict`): the array of the state that holds the mean is the one equal to
    `strategy.mean`, whatever the optimiser library calls it."""
    meta, arrays = strategy.state_dict()
    mean = strategy.mean
    holds_mean = [k for k, a in arrays.items() if k != "best_point" and np.array_equal(a, mean)]
    assert len(holds_mean) == 1, f"no single state array equals the mean: {holds_mean}"
    strategy.load_state_dict(meta, {**arrays, holds_mean[0]: arrays[holds_mean[0]] + by})
    assert np.array_equal(strategy.mean, mean + by)
