"""SFT warm start raises the tiny model's held-out accuracy on the embedded task (measured, asserted).

The full default SFT (500 steps on the embedded model), about 25 s on one CPU thread: a learning test, not a unit
test. The adapter comes from `cached_sft_adapter`, the pipeline's own SFT step: trained here when the session has
not trained it yet, else the identical adapter another test trained (tests/learning/test_grpo_learning.py starts
from the same default SFT: same model, SFT config and data, hence the same cache key). That SFT is reproducible bit
for bit, which the cache relies on, is checked in tests/unit/training/test_sft_reproducible.py.
"""

import pytest

from essaflow.config import EvalConfig, PipelineConfig
from essaflow.data.prepare import prepare_splits
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.training.warm_start import cached_sft_adapter

pytestmark = pytest.mark.learning


def test_sft_raises_held_out_accuracy():
    cfg = PipelineConfig()
    splits = prepare_splits(cfg.data)
    eval_cfg = EvalConfig(samples_per_problem=8, ks=[1, 8])
    before = evaluate_adapter(cfg.model, None, splits.eval, eval_cfg, cfg.sampling)
    adapter = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    assert cfg.sft.steps == 500 and (adapter / "adapter_model.safetensors").exists()
    after = evaluate_adapter(cfg.model, adapter, splits.eval, eval_cfg, cfg.sampling)
    print("before", before.summary(), "after", after.summary())
    assert after.pass_at_k["1"] >= before.pass_at_k["1"] + 0.03
    assert after.greedy > before.greedy
