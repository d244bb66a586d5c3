"""SFT warm start raises the tiny model's held-out accuracy on the embedded task (measured, asserted), reproducibly."""

from essaflow.config import EvalConfig, PipelineConfig
from essaflow.warm_start import evaluate_adapter, prepare_splits, train_sft_adapter


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


def test_sft_is_reproducible_whatever_the_thread_count(tmp_path):
    """The SFT cache key is (model, SFT config, data): the same key must mean the same adapter, bit for bit."""
    import torch

    cfg = PipelineConfig.model_validate({"sft": {"steps": 20}})
    splits = prepare_splits(cfg.data)
    threads = torch.get_num_threads()
    digests = []
    try:
        for i, n in enumerate([threads, threads, 1]):
            torch.set_num_threads(n)
            out = train_sft_adapter(cfg.model, cfg.sft, splits.sft, tmp_path / f"sft-{i}")
            digests.append((out / "adapter_model.safetensors").read_bytes())
    finally:
        torch.set_num_threads(threads)
    assert digests[0] == digests[1] == digests[2]
