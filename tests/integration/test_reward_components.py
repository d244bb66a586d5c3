"""A reward's named components reach each GRPO step's metrics as means over the step's completions, on one rank
and summed over ranks whose completions returned different components, and each ESSA generation's metrics as means
over every candidate's completions, whether the population is scored in shared batches or candidate by candidate.

Processes: a reward file of yours is scored in reward processes of its own, and the ranks are two processes
(gloo). The parts that start none (a share's cost carrying the sums) are in tests/unit/essa/test_reward_components.py.
"""

import dataclasses
import multiprocessing

import numpy as np
import pytest
import torch

from devstack import free_port
from essaflow.essa.metrics import GenerationMetrics
from essaflow.essa.population import LocalPopulation
from essaflow.essa.scoring_spec import scoring_spec
from essaflow.essa.strategy import make_strategy
from essaflow.grpo.advantages import group_advantages
from essaflow.grpo.learner import build_policy
from essaflow.grpo.metrics import StepMetrics, StepSums, component_names
from essaflow.grpo.rollout import collect, worker_slots
from essaflow.grpo.worker_group import CommCounter, WorkerInfo
from essaflow.judging.judge import judge_spec
from essaflow.model.loading import load_tokenizer
from tests.support import essa_tiny
from tests.support.component_reward import write_component_reward
from tests.support.grpo_tiny import make_tiny

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("dynamic", [False, True])
def test_step_metrics_carry_each_component_mean(tmp_path, dynamic):
    ref = write_component_reward(tmp_path)
    cfg, splits, start = make_tiny(tmp_path, [f"eval.reward={ref}", f"grpo.dynamic_sampling={dynamic}"])
    model = build_policy(cfg, start, None, torch.device("cpu"))
    batch = collect(model, load_tokenizer(cfg.model), splits.train, worker_slots(8, 1, 0), 0, cfg.grpo,
                    judge_spec(cfg.eval).build(), cfg.sampling.max_new_tokens)  # fmt: skip
    g = cfg.grpo
    adv = group_advantages(batch.rewards, batch.correct, g.advantage, g.std_mode, g.adv_eps, g.gamma)
    row = StepMetrics.from_sums(1, StepSums.of(batch, adv)).as_row()
    texts = load_tokenizer(cfg.model).batch_decode(batch.completion_ids, skip_special_tokens=True)
    low = sum(t[:1] != "" and t[:1] in "01234" for t in texts) / len(texts)
    assert row["reward.bonus"] == pytest.approx(0.25)
    assert row["reward.low"] == pytest.approx(low) == pytest.approx(row["reward_mean"] - 0.25)
    assert 0 < low < 1, "the random model earns the low-digit reward on some completions only"


def _rank(rank: int, port: int, out) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    info = WorkerInfo(rank, 2, torch.device("cpu"))
    mine = {"format": 2.0, "value": 1.0} if rank == 0 else {"format": 4.0, "style": 3.0}
    total = StepSums(seqs=4.0, reward_parts=mine).all_reduced(info, CommCounter())
    out.put((rank, component_names(mine, info), StepMetrics.from_sums(1, total).reward_components))
    dist.destroy_process_group()


def test_ranks_that_saw_different_components_agree_on_their_means():
    ctx, port = multiprocessing.get_context("spawn"), free_port()
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, out)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = dict((rank, (names, means)) for rank, names, means in (out.get(timeout=120) for _ in procs))
    for p in procs:
        p.join(timeout=60)
    want = (["format", "style", "value"], {"format": 6 / 8, "style": 3 / 8, "value": 1 / 8})
    assert got[0] == got[1] == want


@pytest.mark.parametrize("batched", [True, False])
def test_generation_metrics_carry_each_component_mean(tmp_path, batched):
    cfg, splits, adapter = essa_tiny.make_tiny(tmp_path, [f"eval.reward={write_component_reward(tmp_path)}"])
    pop = LocalPopulation(dataclasses.replace(scoring_spec(cfg, splits, adapter), batched=batched))
    x = np.random.default_rng(0).normal(0, 0.3, (6, pop.dimension))
    fitness, stats = pop.evaluate(x, np.arange(24), seed=0)
    strategy = make_strategy(cfg.essa, pop.dimension)
    row = GenerationMetrics.of(1, fitness, stats, strategy, 0.0).as_row()
    # every candidate judged the same number of completions: the component means are the fitness mean's parts
    assert row["reward.bonus"] == pytest.approx(0.25)
    assert row["reward.low"] == pytest.approx(fitness.mean() - 0.25, abs=1e-6)
    assert 0 < row["reward.low"] < 1
