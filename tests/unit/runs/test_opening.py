"""Opening a run and reporting a failed one, on a file store and MLflow's sqlite backend (no server, no
orchestrator): essaflow/runs/opening.py, essaflow/runs/closing.py, essaflow/runs/failure.py."""

from __future__ import annotations

import pytest

from essaflow import tracking
from essaflow.config import load_config
from essaflow.runs import lease
from essaflow.runs.closing import end_run
from essaflow.runs.failure import failed_run
from essaflow.runs.journal import FlowRecord, Journal, StageFailure
from essaflow.runs.opening import FlowRun, open_pipeline_run, run_tags
from essaflow.storage import open_store


def _cfg(tmp_path, *overrides: str):
    return load_config(None, ["method=essa", "name=open-test", f"storage_uri=file://{tmp_path}/store",
                              f"tracking_uri=sqlite:///{tmp_path}/mlflow.db", *overrides])  # fmt: skip


def test_a_run_opens_with_its_record_lease_and_tagged_mlflow_run_and_a_retry_finds_it_again(tmp_path):
    cfg, journal = _cfg(tmp_path), Journal("flow-a", tmp_path / "journal")
    flow = FlowRun("flow-a", "brave-fox", "finetune", "http://prefect:4200/runs/flow-run/flow-a")
    opened = open_pipeline_run(cfg, None, flow, journal)
    run = opened.run
    try:
        assert run.run_id == "flow-a" and run.stage == "open_run" and not opened.resumed and opened.cluster is None
        assert journal.read().run_id == "flow-a"  # the failure hook may mark it failed from now on
        store = open_store(run.storage_uri)
        assert store.exists("runs/flow-a/record/run.json") and lease.current_lease(store, "flow-a").live()
        tags = tracking.client(run.tracking_uri).get_run(run.mlflow_run_id).data.tags
        assert tags["essaflow.method_label"] == "ESSA(cma, accuracy)" and tags["prefect.flow_name"] == "finetune"
        assert tags["prefect.flow_run_url"] == flow.ui_url and tags["essaflow.run_id"] == "flow-a"

        again = open_pipeline_run(cfg, None, flow, journal).run  # a retried open: the same MLflow run
        assert again.mlflow_run_id == run.mlflow_run_id
    finally:
        end_run(run)
    assert not lease.current_lease(open_store(run.storage_uri), "flow-a").live()


def test_a_run_id_without_a_record_cannot_be_resumed(tmp_path):
    from essaflow.config import ConfigError

    with pytest.raises(ConfigError, match="no run 'nope'"):
        open_pipeline_run(_cfg(tmp_path), "nope", FlowRun("flow-b"), Journal("flow-b", tmp_path / "journal"))


def test_tags_link_only_an_http_ui_address(tmp_path):
    cfg = _cfg(tmp_path)
    tags = run_tags(cfg, "file:///s/", "r1", FlowRun("f1", "n", "finetune", "ephemeral"))
    assert "prefect.flow_run_url" not in tags and tags["essaflow.run_uri"] == "file:///s/runs/r1"


def test_a_failed_run_names_its_first_failed_stage_and_offers_a_resume_only_when_it_can_help():
    bad_input = StageFailure("check", "ConfigError: x", final=True, resumable=False)
    flaky = StageFailure("train", "OSError: gone", final=True)

    failed = failed_run(FlowRecord(run_id="r1", failures=[flaky]), "flow failed", resumable_flow=True)
    assert failed.line() == {"error": "OSError: gone", "stage": "train", "run_id": "r1", "resume": failed.resume}
    assert "--resume r1" in (failed.resume or "") and failed.reason == "train: OSError: gone"
    assert failed_run(FlowRecord(run_id="r1", failures=[bad_input]), "", True).resume is None
    assert failed_run(FlowRecord(run_id="r1"), "", resumable_flow=False).resume is None  # the evaluate flow
    before_lease = failed_run(FlowRecord(), "Crashed: killed", True)
    assert (before_lease.stage, before_lease.error, before_lease.run_id) == ("flow", "Crashed: killed", None)
