"""Full-parameter GRPO on FSDP2 ranks (gloo, 2 real processes): the same steps as DDP and as one process, half
the bytes per rank, float32 masters under bf16 compute, sharded checkpoints that resume bitwise, across world
sizes and after a rank dies mid-save, and one Hugging Face checkpoint out."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from essaflow.grpo import checkpoint as ckpt
from essaflow.grpo.loop import train_grpo
from essaflow.storage.checkpoint_dirs import committed_checkpoints, latest_checkpoint
from tests.support.grpo_tiny import make_tiny
from tests.support.ranks import run_ranks

pytestmark = pytest.mark.integration

FULL = [
    "grpo.parameters=full", "grpo.steps=3", "grpo.lr=1e-3", "grpo.checkpoint_every=1", "grpo.workers.count=2",
    "grpo.eval_every=2",  # rank 0 decodes the held-out set alone on the shards' gathered weights
]  # fmt: skip
TOL = 1e-5


def _tiny(root: Path, *overrides: str):
    return make_tiny(root / "tiny", FULL + list(overrides))


def _weights(out: Path) -> dict[str, torch.Tensor]:
    return load_file(str(out / "model" / "model.safetensors"))


def _masters(checkpoint: Path, tmp: Path) -> dict[str, torch.Tensor]:
    """The float32 master weights in a sharded checkpoint, read back without a process group."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(checkpoint / ckpt.SHARDS), str(tmp / "masters.pt"))
    return torch.load(tmp / "masters.pt", weights_only=True)["model"]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest difference over the tensors both name (a tied head may be listed once or twice)."""
    common = a.keys() & b.keys()
    assert {k for k in a.keys() | b.keys() if "lm_head" not in k} <= common, a.keys() ^ b.keys()
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in common)


def _start_weights(cfg, start: Path) -> dict[str, torch.Tensor]:
    from essaflow.grpo.learner import build_policy

    return {k: v.detach() for k, v in build_policy(cfg, start, None, torch.device("cpu")).state_dict().items()}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fsdp")


@pytest.fixture(scope="module")
def fsdp2(root):
    """3 fp32 steps on 2 FSDP ranks, a checkpoint after each."""
    cfg, splits, start = _tiny(root, "grpo.sharding=fsdp")
    return run_ranks(cfg, splits, start, root / "fsdp2", root / "fsdp2-ckpt")


@pytest.fixture(scope="module")
def ddp2(root):
    cfg, splits, start = _tiny(root, "grpo.sharding=ddp")
    return run_ranks(cfg, splits, start, root / "ddp2", root / "ddp2-ckpt")


def test_fsdp_ddp_and_one_process_take_the_same_steps(root, fsdp2, ddp2, tmp_path):
    cfg, splits, start = _tiny(root, "grpo.workers.count=1")
    one = train_grpo(cfg, splits, start, tmp_path / "one")

    losses = {name: [m["loss"] for m in r["metrics"]] for name, r in [("fsdp", fsdp2), ("ddp", ddp2)]}
    losses["one"] = [m["loss"] for m in one.metrics]
    assert len(losses["one"]) == 3 and any(abs(v) > 1e-4 for v in losses["one"]), losses
    for name in ("fsdp", "ddp"):
        assert max(abs(a - b) for a, b in zip(losses[name], losses["one"])) < TOL, losses
    fsdp_w, ddp_w, one_w = _weights(root / "fsdp2"), _weights(root / "ddp2"), _weights(tmp_path / "one")
    moved = _max_diff(one_w, _start_weights(cfg, start))
    assert moved > 1e-3, moved
    assert _max_diff(fsdp_w, one_w) < TOL and _max_diff(ddp_w, one_w) < TOL, moved
    assert fsdp2["sharding"] == "fsdp" and ddp2["sharding"] == "ddp" and one.sharding == "ddp"
    evals = [[m.get("eval_greedy") for m in r] for r in (fsdp2["metrics"], ddp2["metrics"], one.metrics)]
    assert evals[0] == evals[1] == evals[2] and evals[0][1] is not None, evals


def test_one_fsdp_rank_with_activation_checkpointing_takes_the_same_steps(root, fsdp2, tmp_path):
    cfg, splits, start = _tiny(root, "grpo.sharding=fsdp", "grpo.workers.count=1", "grpo.activation_checkpointing=true")
    one = train_grpo(cfg, splits, start, tmp_path / "one")
    assert one.sharding == "fsdp"
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(one.metrics, fsdp2["metrics"])) < TOL
    assert _max_diff(_weights(tmp_path / "one"), _weights(root / "fsdp2")) < TOL


def test_fsdp_rank_holds_about_half_the_bytes_of_a_ddp_replica(fsdp2, ddp2):
    fsdp, ddp = fsdp2["memory_per_rank"], ddp2["memory_per_rank"]
    ratio = (fsdp["params"] + fsdp["optimizer"]) / (ddp["params"] + ddp["optimizer"])
    assert 0.45 < ratio < 0.55, (fsdp, ddp)
    assert fsdp["grads"] < 0.55 * ddp["grads"] and fsdp["total"] == sum(
        fsdp[k] for k in ("params", "grads", "optimizer")
    )


def test_bf16_compute_keeps_lr_1e6_updates_in_fp32_masters_where_bf16_ddp_loses_them(root, tmp_path):
    bf16 = ["grpo.workers.count=1", "model.dtype=bfloat16", "grpo.lr=1e-6", "grpo.checkpoint_every=0"]
    cfg, splits, start = _tiny(root, *bf16, "grpo.sharding=fsdp")
    train_grpo(cfg, splits, start, tmp_path / "fsdp", tmp_path / "fsdp-ckpt")
    ddp_cfg, _, _ = _tiny(root, *bf16, "grpo.sharding=ddp")
    train_grpo(ddp_cfg, splits, start, tmp_path / "ddp")

    before = _start_weights(cfg, start)
    masters = _masters(latest_checkpoint(tmp_path / "fsdp-ckpt"), tmp_path)
    ddp_after = _weights(tmp_path / "ddp")
    layers = [k for k in masters if ".layers." in k]

    def changed(after: dict[str, torch.Tensor]) -> float:
        moved = sum(int((after[k].float() != before[k].float()).sum()) for k in layers)
        return moved / sum(before[k].numel() for k in layers)

    assert all(masters[k].dtype == torch.float32 for k in layers)
    fp32_share, bf16_share = changed(masters), changed(ddp_after)
    assert fp32_share > 0.95 and bf16_share < 0.1, (fp32_share, bf16_share)


def test_fsdp_publishes_one_hugging_face_checkpoint(root, fsdp2, tmp_path):
    from transformers import AutoModelForCausalLM

    from essaflow.judging.model_eval import evaluate_output

    out = root / "fsdp2" / "model"
    for name in ("config.json", "generation_config.json", "tokenizer.json", "model.safetensors", "manifest.json"):
        assert (out / name).is_file(), name
    masters = _masters(latest_checkpoint(root / "fsdp2-ckpt"), tmp_path)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert all(torch.equal(p, masters[k]) for k, p in model.state_dict().items() if k in masters)
    cfg, splits, _ = _tiny(root)
    report = evaluate_output(cfg.model, out, "full", splits.eval, cfg.eval, cfg.sampling, cfg.data.prompt_format())
    # the checkpoint decodes as the trained ranks did: rank 0's held-out greedy accuracy after the last step
    assert report.summary()["greedy"] == pytest.approx(fsdp2["metrics"][-1]["eval_greedy"])


def test_rank_killed_mid_save_keeps_the_last_checkpoint_and_resumes_bitwise(root, fsdp2, tmp_path):
    cfg, splits, start = _tiny(root, "grpo.sharding=fsdp")
    assert run_ranks(cfg, splits, start, tmp_path / "out", tmp_path / "ckpt", die_saving=2) is None
    assert [p.name for p in committed_checkpoints(tmp_path / "ckpt")] == ["1"]
    assert list((tmp_path / "ckpt" / ".tmp-2" / ckpt.SHARDS).glob("__1_*.distcp")), "rank 1 wrote its shard"
    assert latest_checkpoint(tmp_path / "ckpt").name == "1"

    resumed = run_ranks(cfg, splits, start, tmp_path / "out", tmp_path / "ckpt")
    assert resumed["resumed_from"] == 1 and resumed["checkpoints"] == ["2", "3"]
    assert [m["loss"] for m in resumed["metrics"]] == [m["loss"] for m in fsdp2["metrics"]]
    a, b = _weights(tmp_path / "out"), _weights(root / "fsdp2")
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_fsdp_checkpoint_resumes_on_one_ddp_rank_from_s3(root, fsdp2, s3_store, tmp_path):
    from essaflow.artifacts.checkpoints import restore_checkpoint, sync_checkpoint
    from essaflow.training.run import RunStorage

    run = RunStorage(s3_store, f"runs/fsdp-{tmp_path.name}")
    sync_checkpoint(s3_store, run, root / "fsdp2-ckpt" / "1")
    assert restore_checkpoint(s3_store, run, tmp_path / "ckpt") == "1"
    cfg, splits, start = _tiny(root, "grpo.workers.count=1")  # auto: one rank is a ddp replica
    one = train_grpo(cfg, splits, start, tmp_path / "out", tmp_path / "ckpt")  # 2 fsdp ranks -> 1 replica
    assert one.resumed_from == 1 and one.sharding == "ddp"
    later = [m["loss"] for m in fsdp2["metrics"][1:]]
    assert max(abs(a - b) for a, b in zip([m["loss"] for m in one.metrics[1:]], later)) < TOL
    assert _max_diff(_weights(tmp_path / "out"), _weights(root / "fsdp2")) < TOL


def test_one_rank_fsdp_checkpoint_resumes_on_two(root, fsdp2, tmp_path):
    cfg, splits, start = _tiny(root, "grpo.sharding=fsdp", "grpo.workers.count=1", "grpo.steps=1")
    train_grpo(cfg, splits, start, tmp_path / "one", tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "one")
    two_cfg, _, _ = _tiny(root, "grpo.sharding=fsdp")
    two = run_ranks(two_cfg, splits, start, tmp_path / "two", tmp_path / "ckpt")  # 1 -> 2 ranks
    assert two["resumed_from"] == 1 and two["checkpoints"] == ["2", "3"]
    later = [m["loss"] for m in fsdp2["metrics"][1:]]
    assert max(abs(a - b) for a, b in zip([m["loss"] for m in two["metrics"][1:]], later)) < TOL
    assert _max_diff(_weights(tmp_path / "two"), _weights(root / "fsdp2")) < TOL


def test_lora_on_two_fsdp_ranks_takes_the_steps_of_one_process_and_resumes_from_its_shards(root, tmp_path):
    """Asked for, fsdp shards a LoRA run too: the frozen base in model.dtype, the factors as float32 masters."""
    lora = ("grpo.parameters=lora", "grpo.sharding=fsdp")
    cfg, splits, start = _tiny(root, *lora)
    two = run_ranks(cfg, splits, start, tmp_path / "two", tmp_path / "ckpt")
    one_cfg, _, _ = _tiny(root, "grpo.parameters=lora", "grpo.workers.count=1")
    one = train_grpo(one_cfg, splits, start, tmp_path / "one")
    assert two["sharding"] == "fsdp" and one.sharding == "ddp"
    assert two["memory_per_rank"]["params"] < 0.6 * one.memory_per_rank["params"]  # the base sharded too
    assert max(abs(a["loss"] - b["loss"]) for a, b in zip(two["metrics"], one.metrics)) < TOL

    def factors(out: Path) -> dict[str, torch.Tensor]:
        return load_file(str(out / "adapter" / "adapter_model.safetensors"))

    two_w, one_w = factors(tmp_path / "two"), factors(tmp_path / "one")
    start_w = load_file(str(start / "adapter_model.safetensors"))
    assert two_w.keys() == one_w.keys() == start_w.keys()
    assert _max_diff(one_w, start_w) > 1e-4 and _max_diff(two_w, one_w) < TOL
    loss_gap = max(abs(a["loss"] - b["loss"]) for a, b in zip(two["metrics"], one.metrics))
    print(f"LoRA fsdp vs one process: losses within {loss_gap:.1e}, factors within {_max_diff(two_w, one_w):.1e} "
          f"(moved {_max_diff(one_w, start_w):.1e}); params bytes a rank {two['memory_per_rank']['params']} vs "
          f"{one.memory_per_rank['params']}")  # fmt: skip
    shutil.rmtree(tmp_path / "ckpt" / "3")  # the run is resumed from step 2's shards
    again = run_ranks(cfg, splits, start, tmp_path / "again", tmp_path / "ckpt")
    assert again["resumed_from"] == 2 and again["checkpoints"] == ["3"]
    assert _max_diff(factors(tmp_path / "again"), two_w) == 0.0
