"""The promotion gate's paired rule (essaflow/gate/decision.py) on per-problem outcomes: a clear win promotes, a gain
within the noise of the problem set does not, a guard drop blocks, and stored counts are reused only when the
problem set and the protocol match by digest."""

from __future__ import annotations

import numpy as np
import pytest

from essaflow.config import ConfigError, load_config
from essaflow.data.schema import Problem
from essaflow.gate.champion import eval_identity_tags, reusable_report_uri
from essaflow.gate.config import GateConfig
from essaflow.gate.decision import decide, first_version
from essaflow.gate.digests import problems_digest, protocol_digest
from essaflow.gate.evidence import KEEP, PROMOTE
from essaflow.gate.paired import GateError
from essaflow.generation.config import SamplingConfig
from essaflow.judging.config import EvalConfig
from essaflow.judging.evaluation import EvalReport, pass_at_k

KS = [1, 4, 16]


def _report(counts, greedy, n: int = 16, ids=None) -> EvalReport:
    ids = ids or [f"p{i}" for i in range(len(counts))]
    passk = {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in counts])) for k in KS if k <= n}
    return EvalReport(len(counts), n, float(np.mean(greedy)), passk, [int(c) for c in counts], ids,
                      greedy_correct=[int(g) for g in greedy])  # fmt: skip


def _models(rng, problems: int, n: int, lift: float, greedy_lift: float = 0.0):
    """A champion and a challenger on the same problems: per-problem success rates p and p + lift, counts drawn
    independently (fresh samples from each model), greedy right where the rate is high."""
    p = rng.uniform(0.05, 0.6, problems)
    champ = rng.binomial(n, p)
    chal = rng.binomial(n, np.clip(p + lift, 0, 1))
    g_champ = (rng.uniform(size=problems) < p).astype(int)
    g_chal = (rng.uniform(size=problems) < np.clip(p + greedy_lift, 0, 1)).astype(int)
    return _report(chal, g_chal, n), _report(champ, g_champ, n)


def _decide(chal, champ, cfg: GateConfig | None = None):
    return decide(chal, champ, KS, cfg or GateConfig(), "proto", "probs", "3")


def test_a_clear_paired_win_promotes_with_its_evidence():
    chal, champ = _models(np.random.default_rng(0), 128, 16, lift=0.12, greedy_lift=0.12)
    ev = _decide(chal, champ)
    assert ev.verdict == PROMOTE and ev.promotes, ev.reason
    assert ev.diff == pytest.approx(chal.pass_at_k["1"] - champ.pass_at_k["1"])
    assert 0 < ev.ci_low < ev.diff < ev.ci_high and ev.n_problems == 128
    assert set(ev.guards) == {"greedy", "pass@16"} and all(g["ok"] for g in ev.guards.values())
    tags = ev.tags()
    assert tags["essaflow.gate_verdict"] == "promote" and tags["essaflow.gate_n_problems"] == "128"
    assert tags["essaflow.gate_champion_version"] == "3" and float(tags["essaflow.gate_ci_low"]) > 0
    page = ev.markdown("m", "4")
    assert "**promote**" in page and "pass@16 (guard)" in page and "128 problems" in page


def test_a_gain_within_the_noise_of_128_problems_does_not_promote():
    # the comparison report's case: about +0.3 pass@1 points on 128 problems with n = 256
    chal, champ = _models(np.random.default_rng(1), 128, 256, lift=0.003)
    ev = _decide(chal, champ)
    assert 0 < ev.diff < 0.01 and ev.verdict == KEEP
    assert ev.ci_low < 0 < ev.ci_high and "within noise" in ev.reason and "min_delta" in ev.reason
    # the interval alone keeps it out, with no minimum gain asked
    alone = _decide(chal, champ, GateConfig(min_delta=0.0))
    assert alone.verdict == KEEP and "within noise" in alone.reason and "min_delta" not in alone.reason


def test_a_significant_gain_below_min_delta_does_not_promote():
    rng = np.random.default_rng(2)
    champ_counts = rng.binomial(16, rng.uniform(0.1, 0.5, 400))
    chal_counts = champ_counts + (np.arange(400) % 8 == 0)  # one more correct sample on 1 problem in 8
    g = rng.integers(0, 2, 400)
    chal, champ = _report(chal_counts, g), _report(champ_counts, g)
    ev = _decide(chal, champ, GateConfig(min_delta=0.02))
    assert ev.ci_low > 0 and ev.verdict == KEEP and "below gate.min_delta=0.02" in ev.reason
    assert _decide(chal, champ, GateConfig(min_delta=0.005)).verdict == PROMOTE


def test_a_guard_drop_blocks_a_win_on_the_gate_metric():
    chal, champ = _models(np.random.default_rng(3), 128, 16, lift=0.12, greedy_lift=-0.25)
    ev = _decide(chal, champ)
    assert ev.ci_low > 0.01 and ev.verdict == KEEP
    assert not ev.guards["greedy"]["ok"] and "guard greedy drops" in ev.reason
    assert _decide(chal, champ, GateConfig(guard_metrics=["pass@max"])).verdict == PROMOTE


def test_a_tie_keeps_the_champion_and_the_interval_is_reproducible():
    chal, _ = _models(np.random.default_rng(4), 64, 16, lift=0.0)
    ev = _decide(chal, chal)
    assert ev.diff == 0 and ev.ci_low == ev.ci_high == 0 and ev.verdict == KEEP
    a, b = _models(np.random.default_rng(5), 64, 16, lift=0.05)
    assert (_decide(a, b).ci_low, _decide(a, b).ci_high) == (_decide(a, b).ci_low, _decide(a, b).ci_high)


def test_greedy_as_the_gate_metric_pairs_greedy_outcomes():
    champ = _report([4] * 50, [0] * 25 + [1] * 25)
    chal = _report([4] * 50, [1] * 50)
    ev = _decide(chal, champ, GateConfig(metric="greedy"))
    assert ev.diff == pytest.approx(0.5) and ev.verdict == PROMOTE and "greedy" not in ev.guards


def test_evaluations_of_different_problems_are_not_paired():
    a = _report([1, 2, 3], [0, 1, 1], ids=["a", "b", "c"])
    b = _report([1, 2, 3], [0, 1, 1], ids=["a", "b", "d"])
    with pytest.raises(GateError, match="different problems"):
        _decide(a, b)


def test_the_first_version_promotes_without_a_champion():
    ev = first_version(_report([8, 4], [1, 0]), "pass@1", "proto", "probs")
    assert ev.verdict == PROMOTE and ev.champion is None and ev.champion_scored == "none"
    assert ev.tags()["essaflow.gate_champion"] == "" and "first version" in ev.markdown("m", "1")


def test_stored_counts_are_reused_only_when_problems_and_protocol_match():
    eval_cfg, sampling = EvalConfig(), SamplingConfig()
    problems = [Problem(id=f"q{i}", prompt=f"{i}+1=", answer=str(i + 1)) for i in range(5)]
    proto, probs = protocol_digest(eval_cfg, sampling), problems_digest(problems)
    tags = eval_identity_tags(probs, proto, "s3://b/runs/x/eval/tuned")
    assert reusable_report_uri(tags, probs, proto) == "s3://b/runs/x/eval/tuned"
    # another temperature, n, seed or reward is another protocol: the champion is evaluated again
    for changed in (protocol_digest(eval_cfg, SamplingConfig(temperature=0.7)),
                    protocol_digest(EvalConfig(samples_per_problem=32), sampling),
                    protocol_digest(EvalConfig(seed=7), sampling),
                    protocol_digest(EvalConfig(reward="math_verify"), sampling)):  # fmt: skip
        assert changed != proto and reusable_report_uri(tags, probs, changed) is None
    assert protocol_digest(EvalConfig(ks=[1, 2]), sampling) == proto  # ks are read off the same counts
    grown = problems_digest([*problems, Problem(id="q9", prompt="9+1=", answer="10")])
    assert reusable_report_uri(tags, grown, proto) is None
    assert problems_digest(list(reversed(problems))) == probs  # order does not matter, content does
    assert reusable_report_uri({}, probs, proto) is None  # a version that recorded nothing


def test_the_gate_is_configured_under_gate():
    cfg = load_config(None, ["gate.min_delta=0.02", "gate.guard_metrics=[greedy, pass@4]", "gate.metric=greedy"])
    assert cfg.gate.min_delta == 0.02 and cfg.gate.guards(cfg.eval.ks) == ["pass@4"]  # greedy is the metric
    assert GateConfig().guards([1, 4, 16]) == ["greedy", "pass@16"]
    with pytest.raises(ConfigError, match=r"gate\.guard_metrics \['pass@99'\] are not measured"):
        load_config(None, ["gate.guard_metrics=[pass@99]"])
    with pytest.raises(ConfigError, match="gate.metric 'pass@3' is not measured"):
        load_config(None, ["gate.metric=pass@3"])


@pytest.mark.parametrize(
    ("override", "names"),
    [("registry.min_delta=0.02", "registry is gone: the promotion gate's settings are the `gate` section"),
     ("promotion_metric=greedy", "promotion_metric is gone: the metric the gate promotes on is gate.metric")],
)  # fmt: skip
def test_the_keys_the_gate_section_replaced_are_refused_naming_it(override, names):
    with pytest.raises(ConfigError) as raised:
        load_config(None, [override])
    said = str(raised.value)
    assert said.startswith(f"invalid config: {names}") and "unknown key" not in said
