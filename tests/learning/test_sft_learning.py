"""SFT warm start raises the tiny model's held-out accuracy on the embedded task (measured, asserted).

The full default SFT (500 steps on the embedded model), about 25 s on one CPU thread: a learning test, not a unit
test. That SFT is reproducible bit for bit is checked in tests/unit/test_sft_reproducible.py.
"""

import pytest

from essaflow.config import EvalConfig, PipelineConfig
from essaflow.warm_start import evaluate_adapter, prepare_splits, train_sft_adapter

pytestmark = pytest.mark.learning


def test_sft_raises_held_out_accuracy(tmp_path):
    cfg = PipelineConfig()
    splits = prepare_splits(cfg.data)
    eval_cfg = EvalConfig(samples_per_problem=8, ks=[1, 8])
    before = evaluate_adapter(cfg.model, None, splits.eval, eval_cfg, cfg.sampling)
    adapter = train_sft_adapter(cfg.model, cfg.sft, splits.sft, tmp_path / "sft")
    after = evaluate_adapter(cfg.model, adapter, splits.eval, eval_cfg, cfg.sampling)
    print("before", before.summary(), "after", after.summary())
    assert after.pass_at_k["1"] >= before.pass_at_k["1"] + 0.03
    assert after.greedy > before.greedy
