"""How a stored result names the method that produced it: the train stage's reference gives back the config's tags."""

from __future__ import annotations

import pytest

from essaflow.config import load_config
from essaflow.methods import method_of
from essaflow.methods.tags import trained_method_tags
from essaflow.refs import AdapterRef, TrainingSummary


@pytest.mark.parametrize(
    "overrides",
    [["method=essa", "essa.fitness=accuracy"], ["method=essa", "essa.fitness=answer_logprob"], ["method=fgrpo"],
     ["method=fgrpo", "grpo.gamma=0"], ["method=none"]],
)  # fmt: skip
def test_the_registered_tags_read_from_the_train_reference_are_the_configs(overrides):
    c = load_config(None, overrides)
    method = method_of(c)
    tags = method.tags(c)
    # the train stage's reference: a trained method's tags in its summary, or kind none for the SFT adapter
    summary = TrainingSummary(**(tags if method.trains else {}))
    ref = AdapterRef(uri="u", digest="d", kind=c.method, training=summary)
    assert trained_method_tags(ref) == tags
    assert ("fitness_kind" in tags) == (c.method == "essa")
