"""How a result names the method that produced it, from the method's sections or from the train stage's reference."""

from __future__ import annotations

import pytest

from essaflow.config import load_config
from essaflow.refs import AdapterRef, TrainingSummary
from essaflow.runs.method_tags import method_label, method_tags, trained_method_tags


def _cfg(*overrides: str):
    return load_config(None, list(overrides))


@pytest.mark.parametrize(
    ("overrides", "label"),
    [
        (["method=essa", "essa.strategy=cma", "essa.fitness=accuracy"], "ESSA(cma, accuracy)"),
        (["method=fgrpo", "grpo.gamma=0"], "GRPO"),
        (["method=fgrpo", "grpo.gamma=0.5"], "F-GRPO(gamma=0.5)"),
        (["method=none"], "SFT only"),
    ],
)
def test_the_label_names_the_variant(overrides, label):
    c = _cfg(*overrides)
    assert method_label(c.method, c.essa, c.grpo) == label


@pytest.mark.parametrize(
    "overrides",
    [["method=essa", "essa.fitness=accuracy"], ["method=essa", "essa.fitness=answer_logprob"], ["method=fgrpo"],
     ["method=fgrpo", "grpo.gamma=0"], ["method=none"]],
)  # fmt: skip
def test_the_registered_tags_read_from_the_train_reference_are_the_configs(overrides):
    c = _cfg(*overrides)
    tags = method_tags(c.method, c.essa, c.grpo)
    # the train stage's reference: a trained method's tags in its summary, or kind none for the SFT adapter
    summary = TrainingSummary(**(tags if c.method != "none" else {}))
    ref = AdapterRef(uri="u", digest="d", kind=c.method, training=summary)
    assert trained_method_tags(ref) == tags
    assert ("fitness_kind" in tags) == (c.method == "essa")
