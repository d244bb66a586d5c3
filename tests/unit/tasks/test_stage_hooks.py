"""The hooks that journal a flow run's stages (tasks/run.py, tasks/failures.py), called as Prefect calls them: the
stage counter counts up to the flow's own number of stages, and the CLI reads back the failure and the run id."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from essaflow.runs.journal import Journal
from tasks import failures
from tasks.progress import LISTENERS
from tasks.run import record_stage

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _finished(name: str, seconds: float, state: str = "Completed"):
    end = T0 + timedelta(seconds=seconds)
    task_run = SimpleNamespace(flow_run_id="flow-hooks", name=name, start_time=T0, end_time=end)
    return task_run, SimpleNamespace(name=state, timestamp=task_run.end_time)


def test_the_stage_counter_ends_at_the_flows_number_of_stages():
    from flows.finetune import PIPELINE_STAGES

    seen = []
    LISTENERS.append(lambda stage, done, total, note: seen.append((stage, done, total)))
    try:
        Journal("flow-hooks").plan(len(PIPELINE_STAGES))
        for name in PIPELINE_STAGES:
            record_stage(None, *_finished(name, 1.5, "Cached" if name == "prepare_dataset" else "Completed"))
    finally:
        LISTENERS.pop()
    assert seen[-1] == ("pipeline", len(PIPELINE_STAGES), len(PIPELINE_STAGES))
    assert all(done <= total for _, done, total in seen)
    record = Journal("flow-hooks").read()
    assert record.cached() == {"prepare_dataset"} and record.walls()["train"] == 1.5
    Journal("flow-hooks").remove()


def test_the_cli_reads_the_final_failure_and_the_run_id_once():
    journal = Journal("flow-fail")
    journal.working_on("run-9")
    task_run = SimpleNamespace(flow_run_id="flow-fail", id="t1", name="train", run_count=2)
    failures.record(SimpleNamespace(**{**vars(task_run), "run_count": 1}), OSError("first"))
    failures.record(task_run, OSError("second"), final=True)

    failure, run_id = failures.pop("flow-fail")
    assert run_id == "run-9" and failure is not None and failure.stage == "train"
    assert failure.error == "OSError: first (then 1 retry; the last: OSError: second)"
    assert failures.pop("flow-fail") == (None, None)  # forgotten once reported
