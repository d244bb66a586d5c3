"""Budget accounting (essaflow/usage.py): both trainers count generated, forward and backward tokens and
device-seconds, per generation/step and for the whole call, from what they actually ran."""

import numpy as np
import pytest

from essaflow.essa.loop import train_essa
from essaflow.grpo.loop import train_grpo
from essaflow.usage import Usage
from tests.support import essa_tiny, grpo_tiny


def test_a_share_cost_travels_in_twelve_bytes():
    u = Usage(generated_tokens=1234, forward_tokens=98765, device_s=1.25)
    assert len(u.encode()) == 12
    back = Usage.decode(u.encode())
    assert (back.generated_tokens, back.forward_tokens, back.backward_tokens, back.device_s) == (1234, 98765, 0, 1.25)
    total = Usage().add(back).add(back)
    assert total.generated_tokens == 2468 and total.device_s == pytest.approx(2.5)


def test_essa_counts_what_its_scorers_decoded(tmp_path):
    cfg, splits, adapter = essa_tiny.make_tiny(tmp_path, ["essa.eval_every=0", "essa.checkpoint_every=0"])
    result = train_essa(cfg, splits, adapter, tmp_path / "out")
    rows = [m for m in result.metrics if "generated_tokens" in m]
    e, cap = cfg.essa, cfg.sampling.max_new_tokens
    assert len(rows) == e.generations
    for m in rows:  # each candidate decodes one completion per prompt, 1..cap tokens each
        completions = e.population * e.minibatch
        assert completions <= m["generated_tokens"] <= completions * cap
        assert m["forward_tokens"] > m["generated_tokens"], "prompts count too"
        assert m["device_s"] > 0 and len(m["device_s_per_worker"]) == 1
    u = result.usage
    assert u.generated_tokens == sum(m["generated_tokens"] for m in rows) and u.backward_tokens == 0
    assert u.device_s == pytest.approx(sum(m["device_s"] for m in rows), abs=0.01)


def test_grpo_counts_rollouts_and_updates(tmp_path):
    cfg, splits, start = grpo_tiny.make_tiny(tmp_path, ["grpo.steps=2"])
    result = train_grpo(cfg, splits, start, tmp_path / "out")
    rows = [m for m in result.metrics if "gen_tokens" in m]
    assert len(rows) == 2
    for m in rows:
        assert 0 < m["gen_tokens"] < m["backward_tokens"], "every sequence's prompt and completion go backward"
        assert m["forward_tokens"] >= m["backward_tokens"] and m["device_s"] > 0
    u = result.usage
    assert u.generated_tokens == sum(m["gen_tokens"] for m in rows)
    assert u.backward_tokens == sum(m["backward_tokens"] for m in rows) and u.device_s > 0
    assert np.isfinite(u.device_s)
