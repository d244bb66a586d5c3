"""The ESSA loop in process: checkpoint, kill, resume equals the uninterrupted run bit for bit; minibatch sampler."""

import json

import numpy as np
import pytest

from essaflow.essa.loop import train_essa
from essaflow.essa.prompt_sampler import MinibatchSampler
from essaflow.storage.checkpoint_dirs import latest_checkpoint
from tests.support.essa_tiny import make_tiny


class Killed(RuntimeError):
    pass


def test_sampler_covers_the_split_once_per_pass_without_repeats():
    sampler = MinibatchSampler(size=50, batch=16, seed=0)
    seen = []
    for _ in range(25):
        batch = sampler.next()
        assert len(set(batch.tolist())) == 16, "no prompt twice in one minibatch"
        seen.extend(batch.tolist())
    assert sorted(seen[:48]) == sorted(set(seen[:48])), "first pass: no repeats"
    counts = np.bincount(seen, minlength=50)
    assert counts.max() - counts.min() <= 1 + 1, "every prompt used about equally often"


def test_sampler_state_round_trips():
    a, b = MinibatchSampler(37, 10, 3), MinibatchSampler(37, 10, 99)
    for _ in range(5):
        a.next()
    meta, arrays = a.state_dict()
    b.load_state_dict(json.loads(json.dumps(meta)), arrays)
    for _ in range(10):
        assert np.array_equal(a.next(), b.next())


@pytest.mark.parametrize("strategy", ["cma", "es"])
def test_kill_and_resume_equals_uninterrupted_bitwise(tmp_path, strategy):
    cfg, splits, adapter = make_tiny(tmp_path, [f"essa.strategy={strategy}", "essa.generations=6"])
    straight = train_essa(cfg, splits, adapter, tmp_path / "straight")
    offsets = np.load(straight.output_dir / "essa_offsets.npy")
    assert np.any(offsets != 0), "the search moved"

    def kill_at_5(row):
        if row["generation"] == 5 and "fitness_mean" in row:
            raise Killed  # dies after generation 5 ran, before its checkpoint: the latest one is generation 4

    ckpt = tmp_path / "ckpt"
    written = []
    with pytest.raises(Killed):
        train_essa(cfg, splits, adapter, tmp_path / "run", ckpt, on_metrics=kill_at_5, on_checkpoint=written.append)
    assert [p.name for p in written] == ["00000002", "00000004"]
    (ckpt / "00000005").mkdir()  # a torn write without manifest is ignored
    assert latest_checkpoint(ckpt).name == "00000004"

    changed = cfg.model_copy(deep=True)
    changed.essa.sigma0 = 0.7
    with pytest.raises(ValueError, match=r"different settings \(essa.sigma0\)"):  # only the run that wrote it
        train_essa(changed, splits, adapter, tmp_path / "run", ckpt)

    resumed = train_essa(cfg, splits, adapter, tmp_path / "run", ckpt)
    assert resumed.resumed_from == 4 and resumed.steps == 6
    assert np.array_equal(np.load(resumed.output_dir / "essa_offsets.npy"), offsets)
    keep = ("generation", "fitness_mean", "fitness_max", "sigma", "mean_norm", "eval_greedy")
    strip = [{k: m[k] for k in keep if k in m} for m in straight.metrics]
    assert [{k: m[k] for k in keep if k in m} for m in resumed.metrics] == strip, "same history, metric by metric"


def test_training_writes_a_peft_adapter_and_metrics(tmp_path):
    cfg, splits, adapter = make_tiny(tmp_path, ["essa.generations=2", "essa.eval_every=1"])
    result = train_essa(cfg, splits, adapter, tmp_path / "out")
    assert result.output_dir == tmp_path / "out" / "adapter"
    assert (result.output_dir / "adapter_model.safetensors").exists()
    gens = [m for m in result.metrics if "fitness_mean" in m]
    assert len(gens) == 2 and all(m["bytes"] > 0 and m["candidates_per_s"] > 0 for m in gens)
    assert [m["generation"] for m in result.metrics if "eval_greedy" in m] == [0, 1, 2]
    assert result.bytes_per_update == np.mean([m["bytes"] for m in gens])
    assert (tmp_path / "out" / "metrics.jsonl").read_text().count("\n") == len(result.metrics)


def test_ties_are_measured_every_generation_and_a_tied_search_is_warned_about(tmp_path, caplog):
    cfg, splits, adapter = make_tiny(
        tmp_path, ["essa.strategy=es", "essa.sigma0=1e-9", "essa.generations=6", "essa.eval_every=0"]
    )
    with caplog.at_level("WARNING", logger="essaflow.essa.loop"):
        result = train_essa(cfg, splits, adapter, tmp_path / "run")
    rows = [m for m in result.metrics if "fitness_mean" in m]
    population = cfg.essa.population
    assert [m["distinct_fitness"] for m in rows] == [1] * 6  # a step of 1e-9 flips no answer: everyone ties
    assert all(m["tie_share"] == round(1 - 1 / population, 4) and m["fitness_std"] == 0.0 for m in rows)
    warned = [r.getMessage() for r in caplog.records if "tied for" in r.getMessage()]
    assert len(warned) == 1 and "essa.sigma0" in warned[0] and "essa.minibatch" in warned[0]


def test_time_budget_stops_at_a_generation_boundary_and_survives_a_resume(tmp_path):
    budget = ["essa.generations=40", "essa.eval_every=30", "essa.checkpoint_every=1", "essa.time_budget_s=0.001"]
    cfg, splits, adapter = make_tiny(tmp_path, budget)
    result = train_essa(cfg, splits, adapter, tmp_path / "out", checkpoint_dir=tmp_path / "ck")
    assert result.steps == 1, "the first generation spends the budget; the cap of 40 is not run"
    assert "eval_greedy" in result.metrics[-1], "the last generation is measured"
    again = train_essa(cfg, splits, adapter, tmp_path / "again", checkpoint_dir=tmp_path / "ck")
    assert again.steps == 1 and again.resumed_from == 1, "a resumed run finds its budget spent in the history"
