"""The GRPO learner on a random tiny model: parameters move, checkpoints resume exactly, rollouts are
independent of how groups are split over workers, micro-batching and mini-batching behave."""

import json
import logging

import pytest
import torch
from safetensors.torch import load_file

from essaflow.grpo.advantages import group_advantages
from essaflow.grpo.learner import build_policy
from essaflow.grpo.loop import train_grpo
from essaflow.grpo.rollout import collect, step_prompt_indices, worker_slots
from essaflow.model.loading import load_tokenizer
from essaflow.storage import MANIFEST
from essaflow.storage.checkpoint_dirs import latest_checkpoint
from tests.support.grpo_tiny import make_tiny

TIMING = {"step_s", "gen_s", "train_s", "tokens_per_s", "device_s", "wall_s_mean"}


def _weights(adapter_dir):
    return load_file(str(adapter_dir / "adapter_model.safetensors"))


def _same_metrics(a, b):
    def strip(ms):
        return [{k: v for k, v in m.items() if k not in TIMING} for m in ms]

    return strip(a) == strip(b)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tmp_path_factory.mktemp("grpo-tiny")


@pytest.mark.parametrize("loss", ["grpo", "dapo", "cispo"])
def test_every_trainable_parameter_changes_after_a_step(tiny, tmp_path, loss):
    cfg, splits, start = make_tiny(tiny, [f"grpo.loss={loss}", "grpo.steps=1"])
    result = train_grpo(cfg, splits, start, tmp_path)
    before, after = _weights(start), _weights(result.output_dir)
    assert before.keys() == after.keys() and len(after) == 2 * 4 * 2  # A, B x q,k,v,o x 2 layers
    assert result.metrics[0]["zero_variance_share"] < 1.0
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged
    m = result.metrics[0]
    assert m["clip_frac_low"] == m["clip_frac_high"] == 0.0  # on-policy: r = 1 exactly
    assert result.bytes_per_update == 0  # one process: nothing all-reduced
    assert (result.output_dir / "adapter_config.json").exists()


def test_full_parameter_mode_trains_every_weight(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.parameters=full", "grpo.steps=1", "grpo.lr=1e-3"])
    result = train_grpo(cfg, splits, start, tmp_path)
    merged = build_policy(make_tiny(tiny)[0], start, None, torch.device("cpu")).merge_and_unload().state_dict()
    after = load_file(str(result.output_dir / "model.safetensors"))
    changed = [k for k in after if not torch.equal(after[k], merged[k])]
    assert len(changed) >= len(after) - 1  # every weight (tied embeddings saved once)


def test_resume_is_exact(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=4", "grpo.checkpoint_every=2"])
    full = train_grpo(cfg, splits, start, tmp_path / "a", tmp_path / "a-ckpt")

    class Crash(RuntimeError):
        pass

    def crash_at_3(m):
        if m["step"] == 3:
            raise Crash

    seen = []
    with pytest.raises(Crash):
        train_grpo(cfg, splits, start, tmp_path / "b", tmp_path / "b-ckpt", on_metrics=crash_at_3)
    changed = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"gamma": 0.25})})
    with pytest.raises(ValueError, match=r"different settings \(grpo.gamma\)"):  # only the run that wrote it
        train_grpo(changed, splits, start, tmp_path / "b", tmp_path / "b-ckpt")
    resumed = train_grpo(cfg, splits, start, tmp_path / "b", tmp_path / "b-ckpt", on_checkpoint=seen.append)
    assert resumed.resumed_from == 2 and resumed.steps == 4
    assert [p.name for p in seen] == ["4"]
    a, b = _weights(full.output_dir), _weights(resumed.output_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert _same_metrics(full.metrics, resumed.metrics) and len(resumed.metrics) == 4


def test_checkpoints_are_complete_verified_and_weights_only(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=2", "grpo.checkpoint_every=1"])
    seen = []
    train_grpo(cfg, splits, start, tmp_path / "out", tmp_path / "ckpt", on_checkpoint=seen.append)
    assert [p.name for p in seen] == ["1", "2"]
    latest = latest_checkpoint(tmp_path / "ckpt")
    assert latest.name == "2" and not list((tmp_path / "ckpt").glob(".tmp-*"))
    manifest = json.loads((latest / MANIFEST).read_text())
    assert {"adapter/adapter_model.safetensors", "optimizer.pt", "scheduler.pt", "rng_rank0.pt"} <= set(
        manifest["files"]
    )
    for name in ("optimizer.pt", "scheduler.pt", "rng_rank0.pt"):
        torch.load(latest / name, weights_only=True)
    (latest / "optimizer.pt").write_bytes(b"corrupt")
    assert latest_checkpoint(tmp_path / "ckpt").name == "1"  # a damaged newest falls back


def test_rollouts_are_the_same_however_groups_are_split_over_workers(tiny):
    cfg, splits, start = make_tiny(tiny)
    model = build_policy(cfg, start, None, torch.device("cpu"))
    tok = load_tokenizer(cfg.model)
    s = cfg.grpo.model_copy(update={"prompts_per_step": 8})
    args = (3, s, cfg.eval.reward, cfg.sampling.max_new_tokens)
    whole = collect(model, tok, splits.train, worker_slots(8, 1, 0), *args)
    halves = [collect(model, tok, splits.train, worker_slots(8, 2, r), *args) for r in (0, 1)]
    g = s.group_size
    whole_adv = group_advantages(whole.rewards, whole.correct, s.advantage, s.std_mode, s.adv_eps, s.gamma)
    for half in halves:
        adv = group_advantages(half.rewards, half.correct, s.advantage, s.std_mode, s.adv_eps, s.gamma)
        for i, slot in enumerate(half.slots):
            mine = half.completion_ids[i * g : (i + 1) * g]
            assert torch.equal(mine, whole.completion_ids[slot * g : (slot + 1) * g])
            assert torch.equal(half.rewards[i], whole.rewards[slot])
            assert torch.equal(adv.advantages[i], whole_adv.advantages[slot])  # a group never spans workers
    assert step_prompt_indices(3, 8, len(splits.train), 0) == step_prompt_indices(3, 8, len(splits.train), 0)


def test_micro_batches_accumulate_to_the_same_update(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=1"])
    whole = train_grpo(cfg, splits, start, tmp_path / "whole")
    micro_cfg = cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update={"micro_batch_size": 8})})
    micro = train_grpo(micro_cfg, splits, start, tmp_path / "micro")
    a, b = _weights(whole.output_dir), _weights(micro.output_dir)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def test_mini_batches_take_several_optimizer_steps_off_policy(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=2", "grpo.mini_batches=4", "grpo.lr=0.05"])
    result = train_grpo(cfg, splits, start, tmp_path)
    m = result.metrics[-1]
    assert all(torch.isfinite(torch.tensor(float(m[k]))) for k in ("loss", "entropy", "grad_norm"))
    assert m["clip_frac_low"] + m["clip_frac_high"] > 0  # later mini-batches see r != 1


def test_kl_to_the_sft_start_is_zero_at_the_first_step(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.kl_beta=0.04", "grpo.steps=2"])
    m = train_grpo(cfg, splits, start, tmp_path).metrics
    assert m[0]["kl"] == 0.0 and m[1]["kl"] > 0.0


def test_dynamic_sampling_retries_uniform_groups(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.dynamic_sampling=true", "grpo.steps=1", "grpo.group_size=2"])
    m = train_grpo(cfg, splits, start, tmp_path).metrics[0]
    assert m["retried_groups"] > 0
    assert m["zero_variance_share_final"] < m["zero_variance_share"]


def test_overlong_shaping_and_filtering_change_the_batch_and_the_update(tiny, tmp_path):
    """Shaping lowers the reward of truncated completions; the filter takes exactly their tokens out of the loss."""
    shaped = ["grpo.overlong_buffer=2", "grpo.steps=1"]
    cfg, splits, start = make_tiny(tiny, shaped)
    cfg_filtered = make_tiny(tiny, [*shaped, "grpo.overlong_filter=true"])[0]
    model = build_policy(cfg, start, None, torch.device("cpu"))
    tok = load_tokenizer(cfg.model)
    slots = worker_slots(cfg.grpo.prompts_per_step, 1, 0)
    budget = cfg.grpo.max_new_tokens or cfg.sampling.max_new_tokens
    plain = collect(model, tok, splits.train, slots, 0, cfg.grpo, cfg.eval.reward, budget)
    kept = collect(model, tok, splits.train, slots, 0, cfg_filtered.grpo, cfg.eval.reward, budget)
    assert torch.equal(plain.completion_ids, kept.completion_ids)  # same seed, same samples: only the mask differs
    cut = plain.truncated
    assert cut.any() and float(plain.loss_mask[cut].sum()) > 0  # without the filter truncated tokens carry loss
    assert float(kept.loss_mask[cut].sum()) == 0.0  # with it they carry none
    assert torch.equal(kept.loss_mask[~cut], plain.loss_mask[~cut])  # and the other completions keep theirs
    assert torch.all(plain.rewards.reshape(-1)[cut] < plain.correct.reshape(-1)[cut])  # soft overlong punishment
    assert torch.equal(plain.correct, kept.correct) and torch.equal(plain.rewards, kept.rewards)

    unfiltered = train_grpo(cfg, splits, start, tmp_path / "plain")
    filtered = train_grpo(cfg_filtered, splits, start, tmp_path / "filtered")
    m = filtered.metrics[0]
    assert m["truncated_share"] > 0 and m["reward_mean"] < m["correct_mean"]
    a, b = _weights(unfiltered.output_dir), _weights(filtered.output_dir)
    assert any(not torch.equal(a[k], b[k]) for k in a), "the filter must change the update"


def test_training_log_probs_are_the_ones_the_samples_were_drawn_from(tiny):
    from transformers import GenerationConfig, LogitsProcessorList

    from essaflow.grpo.logprobs import token_logprobs
    from essaflow.grpo.rollout import GumbelSampler, hash_keys

    cfg, splits, start = make_tiny(tiny)
    model = build_policy(cfg, start, None, torch.device("cpu"))
    tok = load_tokenizer(cfg.model)
    enc = tok([p.prompt for p in splits.train[:16]], return_tensors="pt", padding=True, add_special_tokens=False)
    width = enc["input_ids"].shape[1]
    out = model.generate(
        **enc,
        generation_config=GenerationConfig(
            do_sample=False, max_new_tokens=4, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            return_dict_in_generate=True, output_logits=True,
        ),
        logits_processor=LogitsProcessorList([GumbelSampler(hash_keys(0, torch.arange(16)), width, 1.0)]),
    )  # fmt: skip
    comp = out.sequences[:, width:]
    drawn = torch.stack([torch.log_softmax(x, -1) for x in out.logits], 1).gather(-1, comp[..., None])[..., 0]
    is_eos = comp == tok.eos_token_id
    valid = ((is_eos.cumsum(1) - is_eos.long()) == 0).long()
    ids = torch.cat([enc["input_ids"], comp.masked_fill(valid == 0, tok.pad_token_id)], 1)
    with torch.no_grad():
        trained, _ = token_logprobs(model, ids, torch.cat([enc["attention_mask"], valid], 1), width, 1.0)
    assert float(((trained - drawn).abs() * valid).max()) < 1e-4


def test_time_budget_stops_at_a_step_boundary_with_a_final_check(tiny, tmp_path):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=50", "grpo.eval_every=0", "grpo.time_budget_s=0.001"])
    result = train_grpo(cfg, splits, start, tmp_path)
    assert result.steps == 1 and len(result.metrics) == 1  # the first step spends the budget; the cap is not run
    assert result.metrics[0]["wall_s_mean"] > 0.001
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=50", "grpo.eval_every=40", "grpo.time_budget_s=0.001"])
    result = train_grpo(cfg, splits, start, tmp_path / "with-eval")
    assert "eval_greedy" in result.metrics[-1], "the last step before the budget ran out is measured"


def test_grpo_warns_once_when_rollouts_hit_the_cap(tiny, tmp_path, caplog):
    cfg, splits, start = make_tiny(tiny, ["grpo.steps=3", "grpo.max_new_tokens=1"])  # every rollout hits the cap
    with caplog.at_level(logging.WARNING, logger="essaflow.generation.sampling"):
        result = train_grpo(cfg, splits, start, tmp_path)
    shares = [m["truncated_share"] for m in result.metrics]
    assert len(shares) == 3 and min(shares) > 0.5
    assert caplog.text.count("hit the length cap") == 1 and "GRPO step 1: " in caplog.text  # once, at the first
    assert result.truncated_share == round(sum(shares) / 3, 4)
