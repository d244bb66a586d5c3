"""The train stage's reference and summary, built once from the trainer's result, and the stage helpers that need
no trainer (essaflow/training/run.py, essaflow/stages/training.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from essaflow.config import load_config
from essaflow.stages.training import given_adapter, planned_steps, progress_note, stored_adapter
from essaflow.storage import StorageError, open_store
from essaflow.trainer_io import TrainResult
from essaflow.training.run import Trained
from essaflow.usage import Usage


def _trained(**result) -> Trained:
    r = TrainResult(output_dir=Path("/out/model"), steps=4, wall_s=2.5, bytes_per_update=128.0, **result)
    return Trained(r, "file:///s/runs/r/model", "dg", None, "file:///s/runs/r/train/metrics.jsonl")


def test_the_reference_carries_the_trainers_result_and_the_methods_tags():
    cfg = load_config(None, ["method=fgrpo", "grpo.gamma=0.5"])
    trained = _trained(output_kind="full", resumed_from=2, work_by_node={"n1": 2}, worker_failures=1,
                       usage=Usage(generated_tokens=7, device_s=1.23456), sharding="fsdp",
                       memory_per_rank={"params": 10, "total": 30})  # fmt: skip
    ref = trained.adapter_ref(cfg)
    assert (ref.uri, ref.digest, ref.kind, ref.output_kind) == ("file:///s/runs/r/model", "dg", "fgrpo", "full")
    assert ref.metrics_uri.endswith("train/metrics.jsonl")
    s = ref.training
    assert (s.method_label, s.fitness_kind, s.steps, s.resumed_from) == ("F-GRPO(gamma=0.5)", "", 4, 2)
    assert s.usage == {"generated_tokens": 7, "forward_tokens": 0, "backward_tokens": 0, "device_s": 1.2346}
    assert s.metrics_row() == {
        "steps": 4, "wall_s": 2.5, "bytes_per_update": 128.0, "nodes_used": 1, "worker_failures": 1,
        "usage_generated_tokens": 7, "usage_forward_tokens": 0, "usage_backward_tokens": 0, "usage_device_s": 1.2346,
        "memory_per_rank_params": 10, "memory_per_rank_total": 30, "resumed_from": 2,
    }  # fmt: skip


def test_an_essa_reference_names_its_fitness_kind_and_a_fresh_start_logs_no_resume_point():
    cfg = load_config(None, ["method=essa", "essa.fitness=accuracy"])
    s = _trained().adapter_ref(cfg).training
    assert s.fitness_kind == "black-box reward" and "resumed_from" not in s.metrics_row()


def test_progress_shows_the_step_and_the_figures_a_row_has():
    assert progress_note({"generation": 3, "fitness_mean": 0.123456, "sigma": 0.01, "other": 1.0}) == (
        3, "fitness_mean=0.1235 sigma=0.01")  # fmt: skip
    grpo_row = {"step": 5, "reward_mean": 0.5, "eval_greedy": 0.75}
    assert progress_note(grpo_row) == (5, "reward_mean=0.5 eval_greedy=0.75")
    assert planned_steps(load_config(None, ["method=essa", "essa.generations=7"])) == 7
    assert planned_steps(load_config(None, ["method=fgrpo", "grpo.steps=9"])) == 9


def test_a_given_adapter_directory_is_published_and_anything_else_refused(tmp_path):
    store = open_store(f"file://{tmp_path}/store")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    ref = given_adapter(str(adapter), store)
    assert ref.kind == "given" and ref.uri.startswith(store.uri) and stored_adapter(store, "adapters/given/x") is None
    assert given_adapter(ref.uri, store).digest == ref.digest  # the published artifact is used in place
    with pytest.raises(StorageError, match="not a LoRA adapter directory"):
        given_adapter(str(tmp_path), store)
