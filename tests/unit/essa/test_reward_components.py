"""A reward's named components reach each ESSA generation's metrics as means over every candidate's completions,
whether the population is scored in shared batches or candidate by candidate, and travel with a share's cost."""

import dataclasses

import numpy as np
import pytest

from essaflow.essa.metrics import GenerationMetrics
from essaflow.essa.population import LocalPopulation
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.strategy import make_strategy
from essaflow.judging.tally import ComponentTally
from essaflow.usage import Usage
from tests.support.component_reward import write_component_reward
from tests.support.essa_tiny import make_tiny


@pytest.mark.parametrize("batched", [True, False])
def test_generation_metrics_carry_each_component_mean(tmp_path, batched):
    cfg, splits, adapter = make_tiny(tmp_path, [f"eval.reward={write_component_reward(tmp_path)}"])
    pop = LocalPopulation(dataclasses.replace(scoring_spec(cfg, splits, adapter), batched=batched))
    x = np.random.default_rng(0).normal(0, 0.3, (6, pop.dimension))
    fitness, stats = pop.evaluate(x, np.arange(24), seed=0)
    strategy = make_strategy(cfg.essa, pop.dimension)
    row = GenerationMetrics.of(1, fitness, stats, strategy, 0.0).as_row()
    # every candidate judged the same number of completions: the component means are the fitness mean's parts
    assert row["reward.bonus"] == pytest.approx(0.25)
    assert row["reward.low"] == pytest.approx(fitness.mean() - 0.25, abs=1e-6)
    assert 0 < row["reward.low"] < 1


def test_a_share_cost_carries_the_component_sums():
    usage = Usage(generated_tokens=7, forward_tokens=20, device_s=0.5, components=ComponentTally({"a": 3.0}, 4))
    back = Usage.decode(usage.encode())
    assert (back.generated_tokens, back.forward_tokens, back.device_s) == (7, 20, 0.5)
    assert back.components.means() == {"a": 0.75}
    assert len(Usage().encode()) == 12, "a reward without components adds nothing to what travels"
    assert "components" not in usage.as_row()
