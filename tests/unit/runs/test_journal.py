"""The flow run's journal (essaflow/runs/journal.py): what the hooks append is what the run's close, the failure hook
and the CLI read back; a failed stage reports its first error and its last."""

from __future__ import annotations

import os
import time

from essaflow.runs.journal import KEEP_S, Journal, fold


def test_stages_are_read_back_with_their_walls_and_cache_hits(tmp_path):
    journal = Journal("flow-1", tmp_path)
    journal.plan(3)
    journal.working_on("run-a")
    journal.stage_done("open_run", 1.234, "Completed")
    journal.stage_done("prepare_dataset", 0.0, "Cached")
    record = journal.stage_done("train", 12.0, "Completed")

    assert record.planned == 3 and record.run_id == "run-a"
    assert record.walls() == {"open_run": 1.23, "prepare_dataset": 0.0, "train": 12.0}
    assert record.cached() == {"prepare_dataset"}
    assert Journal("flow-2", tmp_path).read().stages == {}  # another flow run's journal is its own


def test_a_stage_that_reports_twice_counts_once(tmp_path):
    journal = Journal("flow-1", tmp_path)
    journal.plan(2)
    journal.stage_done("train", 1.0, "Completed")
    record = journal.stage_done("train", 2.0, "Completed")  # a flow retry runs the stage again
    assert len(record.stages) == 1 and record.walls() == {"train": 2.0}


def test_a_failure_reports_the_first_attempts_error_and_the_last(tmp_path):
    journal = Journal("flow-1", tmp_path)
    journal.attempt_failed("open_run", "t1", 1, "RuntimeError: blip")  # fixed by its retry: not reported
    journal.attempt_failed("train", "t2", 1, "OSError: put checkpoints/3 failed")
    journal.attempt_failed("train", "t2", 2, "OSError: get datasets/y failed")
    journal.attempt_failed("train", "t2", 3, "OSError: get datasets/y failed")
    journal.attempt_failed("train", "t2", 3, "OSError: get datasets/y failed", final=True)

    failure = journal.read().first_failure()
    assert failure is not None and failure.stage == "train" and failure.attempts == 3 and failure.resumable
    last = "OSError: get datasets/y failed"
    assert failure.error == f"OSError: put checkpoints/3 failed (then 2 retries; the last: {last})"


def test_bad_input_is_not_resumable_and_an_unfinished_failure_is_not_reported():
    events = [
        {"event": "failure", "stage": "check", "task_run": "t1", "attempt": 1, "error": "ConfigError: x"},
        {"event": "failure", "stage": "check", "task_run": "t1", "attempt": 1, "error": "ConfigError: x",
         "final": True},
        {"event": "failure", "stage": "check", "task_run": "t1", "attempt": 1, "error": "ConfigError: x",
         "resumable": False},
    ]  # fmt: skip
    failure = fold(events).first_failure()
    assert failure is not None and failure.error == "ConfigError: x" and not failure.resumable
    assert fold(events[:1]).first_failure() is None


def test_a_line_cut_off_mid_write_is_left_out_and_removal_forgets_the_run(tmp_path):
    journal = Journal("flow-1", tmp_path)
    journal.stage_done("open_run", 1.0, "Completed")
    with journal.path.open("a") as f:
        f.write('{"event": "stage", "na')
    assert list(journal.read().stages) == ["open_run"]
    journal.remove()
    assert journal.read().stages == {} and not journal.path.exists()


def test_a_journal_left_behind_is_removed_when_a_later_flow_run_starts(tmp_path):
    old, recent = Journal("old", tmp_path), Journal("recent", tmp_path)
    old.working_on("run-old")
    recent.working_on("run-recent")
    past = time.time() - KEEP_S - 60
    os.utime(old.path, (past, past))
    Journal("new", tmp_path).plan(10)
    assert not old.path.exists() and recent.path.exists()
