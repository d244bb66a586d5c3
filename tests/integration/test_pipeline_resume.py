"""Resuming failed pipeline runs against the real Prefect, MLflow, SeaweedFS and Ray servers.

The S3 server holding the run's artifacts is killed (SIGKILL) for good mid-run: `essaflow run` fails with its JSON
line last and no traceback on the terminal; once the server is back, `essaflow run --resume last` continues from the
newest checkpoint and ends with the adapter of an uninterrupted run, and MLflow holds one point per step. Killed in
the middle of a checkpoint's multipart upload, the run fails cleanly, nothing partial is visible, and a resumed run
completes. A config that changes the run's trajectory is refused, naming the field.

Every resumed run is compared with one uninterrupted `essaflow run` of the same config (a module fixture). The runs
meant to fail get short retry backoffs (ESSAFLOW_RETRY_BACKOFF_SCALE, or the task's options in this process) and a
2 s window per storage operation: the retries still happen, without 15-22 s of waiting between attempts against a
server that is not coming back. A resumed run starts once the restarted server serves (a probe object put and read
back) and gets the default policy and window, as a user's would.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
import yaml

from essaflow import tracking
from essaflow.artifacts import latest_stored_checkpoint, manifest_digest
from essaflow.config import ConfigError, parse_config
from essaflow.storage import MANIFEST, S3Store, open_store
from tests.integration.pipeline_support import REPO, flow_run_logs, tiny
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("ray_disconnect_after")]
#: 4: a kill after checkpoint 1 or in checkpoint 2's upload, and a crash in generation 3, each leave generations to
#: resume into
GENERATIONS = 4
#: one budget for every run here, so their adapters can be compared; CMA-ES state (d=256 covariance) is the
#: checkpoint's biggest file (~1 MB), uploaded in parts once the multipart threshold is lowered
CFG = tiny(method="essa", essa={**tiny()["essa"], "generations": GENERATIONS, "checkpoint_every": 1})
#: the train task's backoffs (5 s, 10 s, each +-50 %) in runs whose storage stays dead: 0.5 s and 1 s
BACKOFF_SCALE = 0.1
FAST_RETRY = {"ESSAFLOW_RETRY_BACKOFF_SCALE": str(BACKOFF_SCALE)}
#: what only the runs meant to fail get: short task backoffs and a 2 s window per storage operation
SHORT_WINDOWS = {**FAST_RETRY, "ESSAFLOW_S3_RETRY_TIMEOUT_S": "2"}


def _essaflow(args: list[str], env: dict[str, str], cwd) -> tuple[int, dict, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "{}"
    return proc.returncode, json.loads(last), proc.stderr, time.monotonic() - t0


@pytest.fixture(scope="module")
def uninterrupted(pipeline_stack, tmp_path_factory) -> SimpleNamespace:
    """One uninterrupted `essaflow run` of CFG on the stack: its adapter digest, MLflow run and wall time."""
    workdir = tmp_path_factory.mktemp("resume-clean")
    (workdir / "resume-cli-clean.yaml").write_text(yaml.safe_dump({**CFG, "name": "resume-cli-clean"}))
    rc, out, err, wall_s = _essaflow(
        ["run", "resume-cli-clean.yaml", "--no-progress"], pipeline_stack.subprocess_env(), workdir
    )
    assert rc == 0, err[-3000:]
    usage = out["training"]["usage"]  # what ESSA spent, in the run's JSON line
    assert usage["generated_tokens"] > 0 and usage["forward_tokens"] >= usage["generated_tokens"]
    assert usage["backward_tokens"] == 0 and usage["device_s"] > 0 and out["training"]["bytes_per_update"] > 0
    rows = pipeline_stack.store().get_bytes(f"runs/{out['run_id']}/train/metrics.jsonl").decode().splitlines()
    assert len([r for r in rows if "fitness_mean" in r]) == GENERATIONS  # the trainer's rows, in storage
    digest = manifest_digest(pipeline_stack.store().read_manifest(f"runs/{out['run_id']}/adapter"))
    return SimpleNamespace(digest=digest, run_id=out["run_id"], mlflow_run_id=out["mlflow_run_id"], wall_s=wall_s)


def _one_point_per_step(tracking_uri: str, mlflow_run_id: str) -> dict[str, list[int]]:
    c = tracking.client(tracking_uri)
    keys = [k for k in c.get_run(mlflow_run_id).data.metrics if k.startswith("train.")]
    return {k: [m.step for m in c.get_metric_history(mlflow_run_id, k)] for k in keys}


def _curve(tracking_uri: str, mlflow_run_id: str) -> list[tuple]:
    """(step, fitness_mean, sigma, mean_norm) per generation: where two runs part, if they do."""
    c = tracking.client(tracking_uri)
    hist = {k: {m.step: m.value for m in c.get_metric_history(mlflow_run_id, f"train.{k}")} for k in
            ("fitness_mean", "sigma", "mean_norm")}  # fmt: skip
    return [(s, *(hist[k].get(s) for k in hist)) for s in sorted(hist["sigma"])]


def _mlflow_run(tracking_uri: str, experiment: str, run_id: str):
    c = tracking.client(tracking_uri)
    exp = c.get_experiment_by_name(experiment)
    return c.search_runs([exp.experiment_id], filter_string=f"tags.`{tracking.RUN_TAG}` = '{run_id}'")[0]


def test_s3_dead_for_good_fails_with_a_json_line_and_resume_last_ends_with_the_uninterrupted_adapter(
    stack_in_process, uninterrupted, seaweedfs_factory, tmp_path, monkeypatch
):
    server = seaweedfs_factory("resume")
    store = server.store("run")
    (tmp_path / "resume-cli.yaml").write_text(yaml.safe_dump({**CFG, "name": "resume-cli"}))
    env = stack_in_process.subprocess_env(**server.env, ESSAFLOW_STORAGE_URI="s3://resume/run", **SHORT_WINDOWS)
    clean, clean_mlflow, clean_s = uninterrupted.digest, uninterrupted.mlflow_run_id, uninterrupted.wall_s
    killed: dict[str, float] = {}

    def kill_after_the_first_checkpoint():
        with contextlib.suppress(AssertionError):  # none within 300 s: the test's `assert killed` says so
            wait_until(lambda: any(k.endswith(f"/checkpoints/00000001/{MANIFEST}") for k in store.list("runs")), 300,
                       "the first checkpoint in storage")  # fmt: skip
            server.service.kill()
            killed["at"] = time.monotonic()

    chaos = threading.Thread(target=kill_after_the_first_checkpoint, daemon=True)
    chaos.start()
    rc, out, err, failed_s = _essaflow(["run", "resume-cli.yaml", "--no-progress"], env, tmp_path)
    chaos.join(timeout=5)

    assert killed, "the S3 server must have died mid-run"
    assert rc == 1, err[-3000:]
    assert set(out) == {"error", "stage", "run_id", "resume"} and out["stage"] == "train", out
    run_id = out["run_id"]
    assert out["resume"].endswith(f"--resume {run_id}") and out["resume"].startswith("essaflow run resume-cli.yaml")
    # the first failure (a checkpoint's storage operation), not what the retries tripped over first
    assert "unreachable" in out["error"] and "/checkpoints/0000000" in out["error"], out["error"]
    assert "Traceback" not in err, err[-3000:]
    tracebacks = [m[:1500] for m in flow_run_logs(run_id) if "Traceback" in m]
    assert len(tracebacks) <= 1, "\n---\n".join(tracebacks)
    failed = _mlflow_run(stack_in_process.mlflow.url, "resume-cli", run_id)
    assert failed.info.status == "FAILED" and failed.data.tags[tracking.FAILURE_TAG].startswith("train: ")

    with pytest.raises(ConfigError, match="essa.sigma0"):  # a changed trajectory is refused before any compute
        from flows.finetune import finetune

        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        changed = {**CFG, "name": "resume-cli", "storage_uri": "s3://resume/run"}
        server.restart()  # serving again, not just accepting connections
        finetune(parse_config({**changed, "essa": {**CFG["essa"], "sigma0": 0.9}}), resume=run_id)

    resume_env = {k: v for k, v in env.items() if k not in SHORT_WINDOWS}  # the resumed run: the default policy
    rc, out, err, resumed_s = _essaflow(
        ["run", "resume-cli.yaml", "--no-progress", "--resume", "last"], resume_env, tmp_path
    )

    assert rc == 0, err[-3000:]
    assert out["run_id"] == run_id and 1 <= out["training"]["resumed_from"] < GENERATIONS
    assert "prepare_dataset" in out["cached"]
    curves = {r: _curve(stack_in_process.mlflow.url, r) for r in (clean_mlflow, out["mlflow_run_id"])}
    assert manifest_digest(store.read_manifest(f"runs/{run_id}/adapter")) == clean, curves
    steps = _one_point_per_step(stack_in_process.mlflow.url, out["mlflow_run_id"])
    assert steps["train.fitness_mean"] == list(range(1, GENERATIONS + 1)), steps
    assert all(len(s) == len(set(s)) for s in steps.values()), steps
    done = _mlflow_run(stack_in_process.mlflow.url, "resume-cli", run_id)
    assert done.info.status == "FINISHED" and tracking.FAILURE_TAG not in done.data.tags
    print(
        f"\nresume timings: uninterrupted CLI run {clean_s:.1f}s; failed CLI run {failed_s:.1f}s "
        f"(killed after checkpoint 1); resumed CLI run {resumed_s:.1f}s from checkpoint "
        f"{out['training']['resumed_from']}; stages {out['stages']}"
    )


def test_s3_killed_mid_checkpoint_upload_leaves_nothing_partial_and_a_resumed_run_completes(
    stack_in_process, uninterrupted, seaweedfs_factory, monkeypatch
):
    import flows.finetune as pipeline

    clean = uninterrupted.digest
    server = seaweedfs_factory("midrun")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ESSAFLOW_S3_RETRY_TIMEOUT_S", SHORT_WINDOWS["ESSAFLOW_S3_RETRY_TIMEOUT_S"])  # this run fails
    monkeypatch.setattr(S3Store, "multipart_threshold", 64 * 1024)
    seen: dict[str, str] = {}

    def kill_mid_upload(request=None, **kwargs):  # a part of checkpoint 2 is on the wire: the server dies
        if "checkpoints/00000002/" in request.url and not seen:
            seen["key"] = request.url.split("?")[0]
            server.service.kill()

    import boto3.session

    real = boto3.session.Session.client

    def hooked(self, service_name, *args, **kwargs):  # every S3 client the run makes (each store has its own)
        client = real(self, service_name, *args, **kwargs)
        if service_name == "s3":
            client.meta.events.register("before-send.s3.UploadPart", kill_mid_upload)
        return client

    monkeypatch.setattr(boto3.session.Session, "client", hooked)
    cfg = parse_config({**CFG, "name": "resume-midupload", "storage_uri": "s3://midrun/run"})
    train = pipeline.train_adapter
    fast = [d * BACKOFF_SCALE for d in train.retry_delay_seconds]  # the same retries, without the waits
    monkeypatch.setattr(pipeline, "train_adapter", train.with_options(retry_delay_seconds=fast))

    state = pipeline.finetune(cfg, return_state=True)

    assert seen, "the server must have died during a multipart upload of checkpoint 2"
    assert state.is_failed()
    run_id = str(state.state_details.flow_run_id)
    server.restart()  # serving again (a put and a get), not just accepting connections
    store = open_store("s3://midrun/run")
    ckpt2 = store.list(f"runs/{run_id}/checkpoints/00000002")
    assert f"runs/{run_id}/checkpoints/00000002/{MANIFEST}" not in ckpt2, "checkpoint 2 must not look complete"
    assert latest_stored_checkpoint(store, SimpleNamespace(run_prefix=f"runs/{run_id}")) == "00000001"
    assert not any(seen["key"].endswith(k) for k in ckpt2), f"the cut-off object is visible: {seen['key']}"

    monkeypatch.setattr(pipeline, "train_adapter", train)  # the resumed run: the default policy and storage window
    monkeypatch.delenv("ESSAFLOW_S3_RETRY_TIMEOUT_S")
    result = pipeline.finetune(cfg, resume=run_id)

    assert result.run_id == run_id and result.training["resumed_from"] == 1
    assert manifest_digest(store.read_manifest(f"runs/{run_id}/adapter")) == clean


def test_a_flow_retry_keeps_the_run_id_resumes_and_logs_each_step_once(stack_in_process, uninterrupted, monkeypatch):
    import flows.finetune as pipeline
    from essaflow.methods import ESSA

    clean = uninterrupted.digest
    real, calls = ESSA.trainer(), []

    def dies_after_logging_generation_3(config, splits, sft, out_dir, checkpoint_dir=None, on_metrics=None,
                                        on_checkpoint=None):  # fmt: skip
        calls.append(1)

        def metrics_then_die(row):
            on_metrics(row)  # generation 3 reaches MLflow (the buffer flushes on the way out), its checkpoint not
            if len(calls) == 1 and row.get("generation") == 3:
                raise RuntimeError("simulated crash of the whole flow run")

        return real(config, splits, sft, out_dir, checkpoint_dir, metrics_then_die, on_checkpoint)

    monkeypatch.setattr(ESSA, "trainer", lambda: dies_after_logging_generation_3)
    no_retry = pipeline.train_adapter.with_options(retries=0)  # the flow's retry takes over
    monkeypatch.setattr(pipeline, "train_adapter", no_retry)
    flow = pipeline.finetune.with_options(retries=1, retry_delay_seconds=0)

    result = flow(parse_config({**CFG, "name": "resume-flow-retry", "storage_uri": stack_in_process.storage_uri}))

    assert len(calls) == 2 and result.training["resumed_from"] == 2
    store = stack_in_process.store()
    assert manifest_digest(store.read_manifest(f"runs/{result.run_id}/adapter")) == clean
    exp = tracking.client(stack_in_process.mlflow.url).get_experiment_by_name("resume-flow-retry")
    assert len(tracking.client(stack_in_process.mlflow.url).search_runs([exp.experiment_id])) == 1
    steps = _one_point_per_step(stack_in_process.mlflow.url, result.mlflow_run_id)
    assert steps["train.fitness_mean"] == list(range(1, GENERATIONS + 1)), steps
