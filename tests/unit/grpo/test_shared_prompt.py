"""grpo.shared_prompt: each group's prompt computed once, in the rollout's prefill and in the log-prob forward, gives
the per-row path's samples, log-probs, loss gradients and training steps (prompts of different lengths, left-padded
to one width, in every batch)."""

import pytest
import torch
from safetensors.torch import load_file

from essaflow.grpo.batch_split import row_logprobs
from essaflow.grpo.learner import build_policy
from essaflow.grpo.loop import train_grpo
from essaflow.grpo.losses import policy_loss
from essaflow.grpo.rollout import collect, hash_keys, sample, sample_groups, worker_slots
from essaflow.model.loading import load_tokenizer
from tests.support.grpo_tiny import make_tiny

TOL = 1e-5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tmp_path_factory.mktemp("shared-prompt")


@pytest.fixture(scope="module")
def drawn(tiny):
    """The tiny policy and one step's rollouts of 8 groups of 4, drawn on the per-row path."""
    cfg, splits, start = make_tiny(tiny, ["grpo.shared_prompt=false"])
    model = build_policy(cfg, start, None, torch.device("cpu"))
    tok = load_tokenizer(cfg.model)
    batch = collect(model, tok, splits.train, worker_slots(8, 1, 0), 0, cfg.grpo, cfg.eval.reward, 4)
    widths = batch.attention_mask[:, : batch.prompt_width].sum(1)
    assert widths.min() < widths.max(), "prompts of different lengths: left padding is exercised"
    assert (batch.loss_mask.sum(1) < batch.loss_mask.shape[1]).any(), "some completion stops before the cap"
    return cfg, splits, model, tok, batch


def _loss_and_grads(model, batch, rows, shared: bool):
    model.zero_grad(set_to_none=True)
    logp, _ = row_logprobs(model, batch, rows, 1.0, shared, True)
    advantages = torch.linspace(-1.0, 1.0, len(rows))
    mask = batch.loss_mask[rows]
    out = policy_loss("grpo", logp, logp.detach() + 0.05, advantages, mask, ref_logp=logp.detach() - 0.1, kl_beta=0.1)
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return logp.detach() * mask, out.loss.detach(), grads


@pytest.mark.parametrize("span", [(0, 32), (2, 14)], ids=["whole-groups", "part-groups"])
def test_shared_prompt_gives_the_same_log_probs_and_gradients(drawn, span):
    _, _, model, _, batch = drawn
    rows = torch.arange(*span)
    logp_row, loss_row, grads_row = _loss_and_grads(model, batch, rows, shared=False)
    logp_shared, loss_shared, grads_shared = _loss_and_grads(model, batch, rows, shared=True)
    assert float((logp_row - logp_shared).abs().max()) < TOL
    assert abs(float(loss_row - loss_shared)) < TOL
    assert grads_row.keys() == grads_shared.keys() and len(grads_row) == 2 * 4 * 2  # A, B x q,k,v,o x 2 layers
    for name, g in grads_row.items():
        assert float(g.abs().max()) > 0, name
        assert torch.allclose(g, grads_shared[name], rtol=1e-4, atol=1e-6), name


def test_a_group_whose_rows_hold_different_prompts_is_refused(drawn):
    _, _, model, _, batch = drawn
    rows = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7])  # two groups' rows under one id below
    with pytest.raises(ValueError, match="different prompts"):
        from essaflow.grpo.logprobs import token_logprobs

        ids, mask = batch.input_ids[rows], batch.attention_mask[rows]
        token_logprobs(model, ids, mask, batch.prompt_width, 1.0, groups=torch.zeros(8, dtype=torch.long))


def test_one_prefill_per_prompt_draws_the_per_row_samples(drawn):
    cfg, splits, model, tok, _ = drawn
    prompts, g = [p.prompt for p in splits.train[:8]], 4
    keys = hash_keys(hash_keys(0, 3, torch.arange(8), 0)[:, None], torch.arange(g)[None, :]).reshape(-1)
    for temperature, top_p in ((1.0, 1.0), (0.7, 0.9)):
        per_row = sample(model, tok, [p for p in prompts for _ in range(g)], keys, temperature, top_p, 4)
        shared = sample_groups(model, tok, prompts, g, keys, temperature, top_p, 4)
        assert torch.equal(per_row.completion_ids, shared.completion_ids)
        assert torch.equal(per_row.completion_mask, shared.completion_mask)
        assert torch.equal(per_row.prompt_ids, shared.prompt_ids) and per_row.texts == shared.texts
        assert per_row.truncated == shared.truncated


@pytest.mark.parametrize(
    "extra",
    [["grpo.steps=2"], ["grpo.mini_batches=2", "grpo.kl_beta=0.04", "grpo.micro_batch_size=6"]],
    ids=["on-policy", "old-policy-and-reference"],
)
def test_training_steps_are_the_same_with_and_without_the_shared_prompt(tiny, tmp_path, extra):
    results = {}
    for shared in (False, True):
        cfg, splits, start = make_tiny(tiny, [*extra, f"grpo.shared_prompt={str(shared).lower()}"])
        results[shared] = train_grpo(cfg, splits, start, tmp_path / str(shared))
    a, b = (load_file(str(r.output_dir / "adapter_model.safetensors")) for r in (results[False], results[True]))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    for m_row, m_shared in zip(results[False].metrics, results[True].metrics):
        assert m_row["reward_mean"] == m_shared["reward_mean"]  # the same samples
        assert abs(m_row["loss"] - m_shared["loss"]) < TOL and abs(m_row["kl"] - m_shared["kl"]) < TOL


def test_columns_after_every_rows_end_are_cut_and_read_zero(drawn):
    from essaflow.grpo.logprobs import token_logprobs

    _, _, model, tok, batch = drawn
    pad = torch.full((len(batch.input_ids), 3), tok.pad_token_id)
    ids, mask = torch.cat([batch.input_ids, pad], 1), torch.cat([batch.attention_mask, torch.zeros_like(pad)], 1)
    groups = torch.arange(len(ids)) // batch.group_size
    with torch.no_grad():
        plain, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.prompt_width, 1.0)
        for g in (None, groups):
            longer, entropy = token_logprobs(model, ids, mask, batch.prompt_width, 1.0, True, g)
            assert longer.shape == entropy.shape == (len(ids), plain.shape[1] + 3)
            assert float((longer[:, : plain.shape[1]] - plain).abs().max()) < TOL
            assert not longer[:, plain.shape[1] :].any() and not entropy[:, plain.shape[1] :].any()
