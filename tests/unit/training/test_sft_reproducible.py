"""SFT is a pure function of its inputs: the SFT cache key relies on it (20 steps, a few seconds)."""

from essaflow.config import PipelineConfig
from essaflow.data.prepare import prepare_splits
from essaflow.training.warm_start import train_sft_adapter


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
