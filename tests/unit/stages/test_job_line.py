"""`essaflow essa|grpo` print the fields `essaflow run` prints for the stages a job runs, built from the same stage
references (essaflow/stages/job.py, essaflow/runs/line.py, cli/pipeline.py); no orchestrator, MLflow or model."""

from __future__ import annotations

from cli.pipeline import Ahead, completed_line
from essaflow.config import load_config
from essaflow.refs import EvalRef
from essaflow.runs.journal import FlowRecord, StageWall
from essaflow.runs.line import STAGE_KEYS
from essaflow.stages.job import JOB_STAGES, job_line
from tests.unit.runs.test_closing import finished

JUDGED = {"reward": "mine.py:score", "reward_digest": "abc123", "threshold": "0.5"}


def runs_of_both():
    """The flow's finished run (its SFT start scored) and a job's references of the same stages."""
    done = finished()
    start = EvalRef(uri="file:///s/eval/sft_start", label="sft_start", summary={"greedy": 0.3, "pass@1": 0.25},
                    num_problems=8, samples_per_problem=4, stage="evaluate-sft_start", judged_with=JUDGED)  # fmt: skip
    after = done.after.model_copy(update={"judged_with": JUDGED})
    return done.__class__(**{**done.__dict__, "start": start, "after": after})


def flow_line() -> dict:
    from essaflow.runs.closing import pipeline_result

    done = runs_of_both()
    record = FlowRecord(stages={s: StageWall(1.0, "Completed") for s in ("open_run", *JOB_STAGES, "register")})
    return completed_line(pipeline_result(done, record, now=130.0), 40.0, Ahead(), "transformers")


def a_job_line(method: str) -> dict:
    done = runs_of_both()
    run = done.run.model_copy(update={"run_id": f"{method}-20260101-000000-abcd1234", "tracking_uri": "",
                                      "experiment_id": "", "mlflow_run_id": ""})  # fmt: skip
    cfg = load_config(None, [f"method={method}"])
    return job_line(cfg, run, done.dataset, done.sft, done.start, done.adapter, done.after, 40.0)


def test_the_jobs_json_keys_equal_the_flows_for_the_stages_they_run():
    flow = flow_line()
    not_run = {k for stage, keys in STAGE_KEYS.items() if stage not in JOB_STAGES for k in keys}
    assert not_run == {"before", "model_name", "model_version", "aliases", "decision", "gate", "tracking_uri",
                       "mlflow_run_id"}  # fmt: skip
    for method in ("essa", "fgrpo"):
        job = a_job_line(method)
        assert list(job) == [k for k in flow if k not in not_run], method  # the same fields in the same order


def test_a_job_says_how_it_was_judged_and_scores_its_sft_start_like_the_flow():
    flow, job = flow_line(), a_job_line("fgrpo")
    assert job["judged_with"] == flow["judged_with"] == JUDGED  # the reward of yours, by name and digest
    assert job["sft_start"] == flow["sft_start"] == {"greedy": 0.3, "pass@1": 0.25}
    assert job["after"] == flow["after"] and job["training"] == flow["training"]
    assert job["data_filtered"] == flow["data_filtered"] == {"max_prompt_tokens": 2}
    assert job["state"] == "completed" and job["run_id"].startswith("fgrpo-") and "before" not in job
    assert set(job["stages"]) == set(JOB_STAGES) and job["wall_s"] == 40.0
    assert set(job["overhead"]) == set(flow["overhead"]) and set(job["parts"]) == set(flow["parts"])
