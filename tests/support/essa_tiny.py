"""A throwaway random tiny Llama with a non-zero LoRA start adapter, for ESSA mechanics tests that run in seconds.

The reward `essa_test_low_digit` is one the random model earns by chance, so fitnesses differ between candidates
and the strategy has something to rank. Learning itself is tested on the calibrated `builtin:tiny` model.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from essaflow.config import PipelineConfig, load_config
from essaflow.data import Splits
from essaflow.data.prepare import prepare_splits
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, save_adapter
from essaflow.model.tiny import build_char_tokenizer

ALL_LINEAR = "[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]"


def _low_digit(completion: str, reference: str) -> float:
    """1 when the completion starts with a digit 0-4."""
    del reference
    return 1.0 if completion[:1] != "" and completion[:1] in "01234" else 0.0


def register_test_reward() -> None:
    """Register `essa_test_low_digit` (idempotent); Ray tests run it in every worker as a setup hook."""
    from essaflow.judging import rewards  # looked up at call time: in a Ray worker this is that process's registry

    if "essa_test_low_digit" not in rewards.REWARDS:
        rewards.register_reward("essa_test_low_digit")(_low_digit)


register_test_reward()


def random_base(root: Path) -> Path:
    """A 2-layer, 32-wide random Llama with the character tokenizer, saved once under root."""
    base = root / "base"
    if not (base / "config.json").exists():
        torch.manual_seed(0)
        tok = build_char_tokenizer()
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
                tie_word_embeddings=True,
            )
        )  # fmt: skip
        model.save_pretrained(base)
        tok.save_pretrained(base)
    return base


def random_adapter(cfg: PipelineConfig, out: Path, seed: int = 0, scale: float = 0.3) -> Path:
    """A LoRA adapter with random, non-zero A and B (a stand-in for an SFT adapter)."""
    if (out / "adapter_config.json").exists():
        return out
    model = attach_lora(load_base_model(cfg.model), cfg.model, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * scale)
    return save_adapter(model, out, load_tokenizer(cfg.model))


def make_tiny(root: Path, overrides: list[str] | None = None) -> tuple[PipelineConfig, Splits, Path]:
    """(config, splits, start adapter) on the random tiny model, ESSA set to a few cheap generations."""
    cfg = load_config(
        None,
        [
            f"model.name_or_path={random_base(root)}",
            "model.lora_rank=4",
            f"model.target_modules={ALL_LINEAR}",
            "data.synthetic.num_problems=300",
            "data.eval_size=32",
            "sampling.max_new_tokens=3",
            "eval.reward=essa_test_low_digit",
            "essa.population=8",
            "essa.minibatch=24",
            "essa.generations=4",
            "essa.sigma0=0.3",
            "essa.eval_every=2",
            "essa.checkpoint_every=2",
            "essa.workers.ray=false",
            *(overrides or []),
        ],
    )
    return cfg, prepare_splits(cfg.data), random_adapter(cfg, root / "adapter")


@contextmanager
def local_ray(test_module: ModuleType) -> Iterator[None]:
    """A 2-CPU local Ray for a test module: its code (fault-injecting scorers) and this module (the test reward)
    travel to the workers by value, not by import path, and every worker registers the test reward."""
    import ray

    from essaflow.cluster import reload_ray_auth

    # A local Ray of the test's own, without token auth: settings an earlier test's cluster left in this process
    # (the environment, and Ray's per-process cache of it) must not reach it.
    saved = {k: os.environ.pop(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS") if k in os.environ}
    reload_ray_auth()
    ray.cloudpickle.register_pickle_by_value(test_module)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": register_test_reward},
    )
    try:
        yield
    finally:
        ray.shutdown()
        os.environ.update(saved)
        reload_ray_auth()


def first_to_claim(marker: str) -> bool:
    """Create `marker` atomically: True in exactly one process (a check-then-touch let two workers both act)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        return True
    except FileExistsError:
        return False
