"""What a finished run reports and shows, built from its stage references without the orchestrator or MLflow
(essaflow/runs/closing.py, essaflow/runs/summary.py)."""

from __future__ import annotations

import dataclasses

from essaflow.refs import (
    AdapterRef,
    DatasetRef,
    EvalRef,
    ModelRef,
    RegisteredRef,
    RunInputs,
    RunRef,
    TrainingSummary,
)
from essaflow.runs.closing import closing_tags, pipeline_result
from essaflow.runs.journal import FlowRecord, StageWall
from essaflow.runs.summary import FinishedRun, data_summary, passk_rows, skipped_markdown, summary_markdown

TRAINING = TrainingSummary(
    method_label="ESSA(es, accuracy)", fitness_kind="black-box reward", steps=3, resumed_from=1,
    work_by_node={"a1b2": 12}, worker_failures=0, wall_s=4.5, bytes_per_update=96.0, memory_per_rank={},
    usage={"generated_tokens": 10, "forward_tokens": 30, "backward_tokens": 0, "device_s": 1.5},
)  # fmt: skip
SNAPSHOT = {"digest": "snap1", "sources": [{"role": "training", "source": "synthetic", "digest": "d1",
                                            "files": {f"f{i}": f"v{i}" for i in range(12)}}]}  # fmt: skip


def finished(tracking_uri: str = "http://user:pw@mlflow:5000") -> FinishedRun:
    run = RunRef(run_id="run-1", name="tiny", storage_uri="file:///s/", tracking_uri=tracking_uri, experiment_id="1",
                 mlflow_run_id="ml-1", flow_run_id="flow-1", started_at=100.0, stage="open_run",
                 timings={"storage": 1.0, "tracking": 0.5})  # fmt: skip
    dataset = DatasetRef(uri="file:///s/datasets/x", name="x", hash="h", config_hash="c", sizes={"train": 8},
                         filtered={"max_prompt_tokens": 2}, snapshot=SNAPSHOT, excluded={"held_out_unused": 1},
                         stage="prepare_dataset", timings={"compute": 9.0})  # fmt: skip
    base = ModelRef(name_or_path="builtin:tiny", local_path="/m", digest="md", stage="build_base_model")
    sft = AdapterRef(uri="file:///s/sft", digest="sd", kind="sft", training=TrainingSummary(steps=20),
                     stage="warm_start", timings={"compute": 2.0})  # fmt: skip
    adapter = AdapterRef(uri="file:///s/runs/run-1/adapter", digest="ad", kind="essa", training=TRAINING,
                         stage="train", timings={"compute": 5.0, "storage": 0.25})  # fmt: skip
    before = EvalRef(uri="file:///s/eval/base", label="base", summary={"greedy": 0.25, "pass@1": 0.2},
                     num_problems=8, samples_per_problem=4, stage="evaluate-base")  # fmt: skip
    after = EvalRef(uri="file:///s/eval/tuned", label="tuned", summary={"greedy": 0.5, "pass@1": 0.45},
                    num_problems=8, samples_per_problem=4, stage="evaluate-tuned")  # fmt: skip
    model = RegisteredRef(name="tiny", version="2", aliases=["champion"], decision="promoted",
                          model_uri="models:/tiny/2", gate={"verdict": "promote"}, stage="register",
                          timings={"tracking": 1.0})  # fmt: skip
    return FinishedRun(run, dataset, base, sft, adapter, before, after, model)


def test_the_result_carries_the_training_summary_under_the_same_keys():
    record = FlowRecord(stages={"prepare_dataset": StageWall(0.0, "Cached"), "train": StageWall(6.0, "Completed")})
    result = pipeline_result(finished(), record, now=130.0)

    assert list(result.training) == ["kind", "method_label", "fitness_kind", "steps", "resumed_from", "work_by_node",
                                     "worker_failures", "wall_s", "bytes_per_update", "sharding", "memory_per_rank",
                                     "usage"]  # fmt: skip
    assert result.training["kind"] == "essa" and result.training["steps"] == 3 and result.training["resumed_from"] == 1
    assert result.tracking_uri == "http://mlflow:5000"  # no credential in what the run reports
    assert result.stages == {"prepare_dataset": 0.0, "train": 6.0} and result.cached == ["prepare_dataset"]
    assert result.flow_s == 30.0
    # the cached dataset stage's 9 s of compute are not this run's; every other stage's parts are
    assert result.parts == {"compute": 7.0, "storage": 1.25, "tracking": 1.5}
    assert result.data == {"snapshot": "snap1", "files": 12, "held_out_unused": 1}


def test_an_sft_adapter_found_in_storage_is_reported_as_cached():
    done = finished()
    done = done.__class__(*[r.model_copy(update={"reused": True}) if r is done.sft else r for r in done.refs()])
    record = FlowRecord(stages={"prepare_dataset": StageWall(0.0, "Cached"), "warm_start": StageWall(0.5, "Completed")})
    result = pipeline_result(done, record, now=130.0)
    assert result.cached == ["prepare_dataset", "warm_start"]
    assert pipeline_result(finished(), record, now=130.0).cached == ["prepare_dataset"]  # trained here: not cached


def test_an_adapter_trained_nowhere_reports_the_defaults():
    done = finished()
    untrained = done.adapter.model_copy(update={"kind": "none", "training": TrainingSummary()})
    result = pipeline_result(dataclasses.replace(done, adapter=untrained), FlowRecord(), now=100.0)
    assert result.training == {"kind": "none", "method_label": "", "fitness_kind": "", "steps": 0, "resumed_from": None,
                               "work_by_node": {}, "worker_failures": 0, "wall_s": 0.0, "bytes_per_update": 0.0,
                               "sharding": "", "memory_per_rank": {}, "usage": {}}  # fmt: skip


def test_the_closing_tags_name_the_version_and_mark_the_run_trained():
    done = finished()
    tags = closing_tags(done.dataset, done.adapter.uri, done.model)
    assert tags["essaflow.model"] == "models:/tiny/2" and tags["essaflow.aliases"] == "champion"
    filtered_tag = "essaflow." + "data_filtered.max_prompt_tokens"  # a tag name, not a module path
    assert tags[filtered_tag] == "2" and tags["essaflow.outcome"] == "trained"


def test_the_summary_page_shows_scores_method_and_where_everything_is():
    done = finished()
    assert passk_rows(done.before, done.after) == [
        {"metric": "greedy", "before": 0.25, "after": 0.5, "delta": 0.25},
        {"metric": "pass@1", "before": 0.2, "after": 0.45, "delta": 0.25},
    ]
    page = summary_markdown(done)
    assert "| greedy | 0.25 | 0.5 | +0.25 |" in page and "Promotion gate: promoted." in page
    assert "Method: ESSA(es, accuracy); fitness: black-box reward." in page
    assert "adapter (essa, 3 steps)" in page and "pw" not in page
    assert "`f9` `v9`" in page and "`f10`" not in page and "... and 2 more" in page  # the first ten files listed
    assert data_summary(done.dataset)["files"] == 12


def test_a_skipped_run_page_names_the_reason_and_the_inputs():
    checked = RunInputs(inputs={"data": "d", "config": "c", "base": "b"}, skip_reason="nothing new since run r0")
    page = skipped_markdown(finished().run, checked, checked.skip_reason or "")
    assert page.startswith("# Skipped `tiny`: nothing new") and "nothing new since run r0." in page
    assert "- base: `b`" in page


def test_the_sft_start_is_reported_apart_from_what_the_method_added():
    done = finished()
    start = EvalRef(uri="file:///s/eval/sft_start", label="sft_start", summary={"greedy": 0.375, "pass@1": 0.3},
                    num_problems=8, samples_per_problem=4, stage="evaluate-sft_start",
                    timings={"compute": 1.0})  # fmt: skip
    done = FinishedRun(*[getattr(done, f) for f in ("run", "dataset", "base", "sft", "adapter", "before", "after",
                                                    "model")], start)  # fmt: skip
    rows = passk_rows(done.before, done.after, done.start)
    assert rows[0] == {"metric": "greedy", "before": 0.25, "after": 0.5, "delta": 0.25, "sft_start": 0.375,
                       "sft_delta": 0.125, "method_delta": 0.125}  # fmt: skip
    page = summary_markdown(done)
    assert "| metric | base | SFT start | tuned | SFT part | method part |" in page
    assert "| greedy | 0.25 | 0.375 | 0.5 | +0.125 | +0.125 |" in page
    result = pipeline_result(done, FlowRecord(stages={}), now=130.0)
    assert result.sft_start == {"greedy": 0.375, "pass@1": 0.3} and result.parts["compute"] >= 1.0
