"""Resume checks and failure records, without servers: which configs may continue a run, what a failed stage reports."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from essaflow.checks.resume import check_resumable
from essaflow.config import ConfigError, load_config
from essaflow.runs.record import record_run, recorded_config
from essaflow.runs.resume import resolve_run_id
from essaflow.storage import open_store
from tasks import failures


def _cfg(*overrides: str):
    return load_config(None, ["method=essa", *overrides])


def test_a_config_that_changes_only_budget_free_fields_may_resume():
    check_resumable(_cfg(), _cfg("eval.ks=[1, 2]", "tracking_uri=sqlite:///x.db"), "r1")


def test_a_changed_trajectory_field_is_refused_naming_the_field_and_both_values():
    with pytest.raises(ConfigError) as err:
        check_resumable(_cfg(), _cfg("essa.sigma0=0.7", "data.eval_size=8"), "r1")
    msg = str(err.value)
    assert "essa.sigma0" in msg and "0.7" in msg and "data.eval_size" in msg and "r1" in msg


def test_a_changed_held_out_source_is_refused():
    with pytest.raises(ConfigError, match="eval.data"):
        check_resumable(_cfg(), _cfg("eval.data.path=test.jsonl"), "r1")


def test_a_changed_method_is_refused():
    with pytest.raises(ConfigError, match="method"):
        check_resumable(_cfg(), load_config(None, ["method=fgrpo"]), "r1")


def test_a_run_id_resolves_through_its_recorded_config(tmp_path):
    store = open_store(f"file://{tmp_path}")
    record_run(store, "run-a", _cfg())
    record_run(store, "run-a", _cfg("essa.sigma0=0.9"))  # a retry never rewrites the first attempt's record
    assert recorded_config(store, "run-a").essa.sigma0 == _cfg().essa.sigma0
    uri = f"sqlite:///{tmp_path}/mlflow.db"  # no MLflow run of run-a: not completed
    assert resolve_run_id("run-a", store, uri, _cfg()) == "run-a"
    with pytest.raises(ConfigError, match="no run 'nope'"):
        resolve_run_id("nope", store, "unused", _cfg())  # answered from storage: no tracking server asked
    with pytest.raises(ConfigError, match="not a run id"):
        resolve_run_id("../x", store, "unused", _cfg())


def _task_run(run_count: int, id_: str = "t1"):
    return SimpleNamespace(flow_run_id="f1", id=id_, name="train", run_count=run_count)


def test_a_stage_failure_reports_the_first_attempts_error_and_the_last():
    failures.record(_task_run(1), RuntimeError("retryable blip"), "")  # fixed by its retry: not reported
    failures.record(_task_run(1, "t2"), OSError("put_object runs/x/checkpoints/3 failed"))
    failures.record(_task_run(2, "t2"), OSError("get datasets/y failed"))
    state = SimpleNamespace(result=lambda: (_ for _ in ()).throw(OSError("get datasets/y failed")), message="")
    failures.on_task_failure(None, _task_run(3, "t2"), state)
    failure, _ = failures.pop("f1")
    assert failure.stage == "train" and failure.attempts == 3
    assert failure.error.startswith("OSError: put_object runs/x/checkpoints/3 failed (then 2 retries")
    assert failure.error.endswith("get datasets/y failed)")


def test_an_adapter_config_is_written_in_the_same_bytes_by_every_process(tmp_path):
    import json

    from essaflow.model.loading import stable_adapter_config

    for name, order in (("a", ["v_proj", "q_proj", "o_proj"]), ("b", ["o_proj", "v_proj", "q_proj"])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps({"target_modules": order, "r": 8}))
        stable_adapter_config(tmp_path / name)
    a, b = ((tmp_path / n / "adapter_config.json").read_bytes() for n in "ab")
    assert a == b and json.loads(a)["target_modules"] == ["o_proj", "q_proj", "v_proj"]
