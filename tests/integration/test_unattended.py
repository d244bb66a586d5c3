"""Left alone on real servers: scheduled fine-tunes run by a process worker, nothing new skipped, a run killed outright
found and resumed by one process only, and a failed scheduled run reaching a webhook.

The session's MLflow, SeaweedFS and Ray serve here; the Prefect server is this module's own, because the session's
runs with its scheduler off (a nightly cron firing mid-suite would hand other tests' `--run-once` workers the wrong
run). The scheduler loops every 2 s, so a test deployment on a 30 s interval schedule runs unattended:

1. the first scheduled run fine-tunes to completion; the next one, with the same data snapshot, config and base model,
   ends in seconds in a Completed state named Skipped;
2. a run killed with SIGKILL mid-training (Prefect reports it Crashed; the worker runs the flow's crash hook, so its
   MLflow run is FAILED at once) is found by `essaflow run --resume last` once its heartbeat is stale, and resumes
   from its checkpoint; a second `--resume` of it meanwhile is refused, naming the first resumer's host and pid;
3. a scheduled run that fails reaches a local HTTP receiver through the automation `essaflow deploy` defines (the
   killed one's Crashed reaches it too).
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import partial
from types import SimpleNamespace

import psutil
import pytest
import yaml

from essaflow import tracking
from essaflow.runs.lease import current_lease
from tests.integration.pipeline_support import REPO, prefect_cli, tiny
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("unattended"), pytest.mark.timeout(1800)]
NAME = "unattended-test"
#: the fine-tune's schedule: runs due while one holds the deployment's slot wait for it (AwaitingConcurrencySlot); a
#: shorter interval piles them up faster than the worker re-proposes them, and sqlite's server falls behind (503s)
INTERVAL_S = 30
HEARTBEAT_S = 1.0  # a killed run's lease is stale 4 s after its last heartbeat
#: the test deployments' pool, the one the worker polls: prefect.yaml's deployments (deployed too, for the alert) go to
#: essaflow-process, where no worker runs their crons
POOL = "essaflow-unattended"
#: the failing deployment's one run is due this long after the deploy command starts. Prefect's scheduler writes a
#: Scheduled state without an event, and its triggers hold the later events of a run that left Scheduled under 5
#: minutes after entering it for up to 15 minutes (waiting for that predecessor); nightly runs are scheduled long
#: ahead, so this one is too (docs/unattended.md, "When an alert can be late"). The margin over 300 s covers the
#: deploy command's own time and the worker taking a run up to 10 s early (its prefetch)
BROKEN_LEAD_S = 360


class Receiver(http.server.ThreadingHTTPServer):
    """The webhook's far end: every POSTed JSON body, in order."""

    def __init__(self):
        self.bodies: list[dict] = []
        received = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                received.append(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"

    def wait_for(self, text: str, timeout: float) -> dict:
        """The first body that mentions `text`; AssertionError naming the bodies received if none comes in time."""
        try:
            return wait_until(lambda: next((b for b in self.bodies if text in json.dumps(b)), None), timeout,
                              f"a webhook mentioning {text!r}", every=0.5)  # fmt: skip
        except AssertionError as e:
            raise AssertionError(f"{e}; received: {self.bodies}") from None


@pytest.fixture(scope="module")
def stack(pipeline_stack, tmp_path_factory) -> Iterator[SimpleNamespace]:
    """The session stack with this module's scheduling Prefect server, a process worker and a webhook receiver."""
    from devstack import free_port, start_prefect_server, start_prefect_worker

    sd = tmp_path_factory.mktemp("unattended-prefect")
    fast = {
        "PREFECT_SERVER_SERVICES_SCHEDULER_LOOP_SECONDS": "2",
        "PREFECT_DEPLOYMENT_CONCURRENCY_SLOT_WAIT_SECONDS": "2",
    }
    server = start_prefect_server(sd, free_port(), scheduler=True, extra_env=fast)
    env = pipeline_stack.subprocess_env(
        PREFECT_API_URL=f"{server.url}/api",
        PREFECT_HOME=str(sd / "client-home"),
        PREFECT_LOCAL_STORAGE_PATH=str(sd / "client-home" / "storage"),
        ESSAFLOW_STORAGE_URI=f"s3://{pipeline_stack.s3.bucket}/unattended-{uuid.uuid4().hex[:8]}",
        ESSAFLOW_HEARTBEAT_S=str(HEARTBEAT_S),
        PREFECT_WORKER_QUERY_SECONDS="2",
    )
    receiver = Receiver()
    worker = None
    try:
        done = prefect_cli("work-pool", "create", POOL, "--type", "process", env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        worker = start_prefect_worker(sd / "worker", env["PREFECT_API_URL"], POOL, extra_env=env, cwd=REPO)
        yield SimpleNamespace(env=env, receiver=receiver, worker=worker, store_uri=env["ESSAFLOW_STORAGE_URI"],
                              s3=pipeline_stack.s3, tmp=tmp_path_factory.mktemp("unattended"))  # fmt: skip
    finally:
        receiver.shutdown()
        if worker is not None:
            worker.stop()
        server.stop()


def _client(env):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(env["PREFECT_API_URL"])


def _essaflow(args: list[str], env: dict[str, str], cwd) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args], cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finished(proc: subprocess.Popen, timeout: float = 600) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=timeout)
    last = out.strip().splitlines()[-1] if out.strip() else "{}"
    return proc.returncode, json.loads(last), err


def _deploy(env, name: str, params: dict, interval: int | None = None, anchor: datetime | None = None) -> None:
    args = ["--no-prompt", "deploy", "flows/finetune.py:finetune_essa", "-n", name, "--pool", POOL,
            "--tag", "essaflow", "--concurrency-limit", "1", "--params", json.dumps(params)]  # fmt: skip
    args += ["--interval", str(interval)] if interval else ["--empty-interval"]
    args += ["--anchor-date", anchor.isoformat()] if anchor else []
    out = prefect_cli(*args, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _runs(env, deployment: str):
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with _client(env) as c:
        flt = DeploymentFilter(name=DeploymentFilterName(any_=[deployment]))
        return c.read_flow_runs(deployment_filter=flt, sort=FlowRunSort.EXPECTED_START_TIME_ASC)


def _stop_schedule(env, deployment: str) -> None:
    """Delete the deployment: the server deletes its runs that have not started (scheduled or waiting for the slot);
    the runs that ended stay. A busy server (sqlite on loaded cores) may answer 503: asked again."""

    def delete() -> bool:
        with _client(env) as c:
            c.delete_deployment(c.read_deployment_by_name(f"finetune/{deployment}").id)
        return True

    _wait(delete, 20, f"the deployment {deployment} to be deleted", every=2)


#: wait_until with a busy server's errors polled again (Prefect's sqlite server answers 503 on loaded cores)
_wait = partial(wait_until, every=1.0, retry_on=Exception)


@pytest.fixture(scope="module")
def deployed(stack):
    """A deployment whose scheduled run fails, its one run BROKEN_LEAD_S ahead (hourly from then: the test deletes
    it after the first), then `essaflow deploy --alert-webhook`. The broken one goes first: the module waits for its
    run, so its lead starts as early as it can."""
    first = datetime.now(timezone.utc) + timedelta(seconds=BROKEN_LEAD_S)
    _deploy(stack.env, "unattended-broken", {"config": _essa_config(), "resume": "no-such-run"}, 3600, first)
    out = _essaflow(["deploy", "--alert-webhook", stack.receiver.url], stack.env, REPO)
    rc, line, err = _finished(out, timeout=300)
    assert rc == 0, err[-3000:]
    assert line["alert"]["automation"] == "essaflow-run-failed" and "/hook" not in line["alert"]["webhook"]
    return SimpleNamespace(line=line, broken_at=first)


@pytest.fixture(scope="module")
def scheduled(stack, deployed) -> SimpleNamespace:
    """A 30 s schedule runs the tiny fine-tune until one run completed and a later one ended; then it stops."""
    _deploy(stack.env, "unattended", {"config": _essa_config()}, interval=INTERVAL_S)
    t0 = time.monotonic()

    def two_final():  # in the order they ran (the worker may start a later-scheduled run first)
        final = [r for r in _runs(stack.env, "unattended") if r.state and r.state.is_final()]
        return sorted(final, key=lambda r: r.start_time) if len(final) >= 2 else None

    final = _wait(two_final, 900, "a completed and a second final scheduled run", every=2)
    _stop_schedule(stack.env, "unattended")
    return SimpleNamespace(first=final[0], second=final[1], took=time.monotonic() - t0)


def test_scheduled_runs_fine_tune_unattended_and_the_next_with_nothing_new_is_skipped_in_seconds(stack, scheduled):
    first, second = scheduled.first, scheduled.second
    assert first.state.name == "Completed" and first.auto_scheduled, first.state
    assert second.state.name == "Skipped" and second.state.type.value == "COMPLETED" and second.auto_scheduled
    assert f"nothing new since run {first.id}" in second.state.message
    skipped_s = (second.end_time - second.start_time).total_seconds()
    trained_s = (first.end_time - first.start_time).total_seconds()
    assert skipped_s < 30 and skipped_s < trained_s / 3, (skipped_s, trained_s)
    with _client(stack.env) as c:
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

        flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[second.id]))
        artifacts = {a.key: a.data for a in c.read_artifacts(artifact_filter=flt)}
    assert "nothing new" in artifacts["finetune-skipped"]
    c = tracking.client(stack.env["MLFLOW_TRACKING_URI"])
    runs = c.search_runs([c.get_experiment_by_name(NAME).experiment_id])
    by_id = {r.data.tags[tracking.RUN_TAG]: r for r in runs}
    skipped = by_id[str(second.id)]
    assert skipped.info.status == "FINISHED" and skipped.data.tags["essaflow.outcome"] == "skipped"
    assert "nothing new" in skipped.data.tags["essaflow.skipped"]
    assert by_id[str(first.id)].data.tags["essaflow.outcome"] == "trained"
    print(f"scheduled: trained run {trained_s:.1f}s, skipped run {skipped_s:.1f}s (wall to both {scheduled.took:.0f}s)")


def _essa_config(**over) -> dict:
    """The test budgets as the finetune-essa form takes them (no grpo section)."""
    return {k: v for k, v in tiny(name=NAME, **over).items() if k != "grpo"}


@pytest.fixture(scope="module")
def killed(stack, scheduled) -> SimpleNamespace:
    """A run of 48 generations killed with SIGKILL once its first checkpoint is in storage.

    A tiny generation takes about 0.25 s, so 48 leave the test seconds to see the checkpoint and kill the run
    while it is still training (with 6, a loaded machine saw the checkpoint after training had ended)."""
    cfg = _essa_config(essa={**tiny()["essa"], "generations": 48})
    _deploy(stack.env, "unattended-kill", {"config": cfg})
    out = prefect_cli("deployment", "run", "finetune/unattended-kill", env=stack.env)
    assert out.returncode == 0, out.stdout + out.stderr
    run = _wait(lambda: _runs(stack.env, "unattended-kill"), 30, "the flow run")[0]
    run_id = str(run.id)
    store = stack.s3.store(stack.store_uri.removeprefix(f"s3://{stack.s3.bucket}/"))  # this process's S3 client
    # committed: the step's manifest beside data/ (the trainer's own data/manifest.json is uploaded before it)
    committed = re.compile(rf"runs/{run_id}/checkpoints/[^/]+/manifest\.json$")
    _wait(lambda: [k for k in store.list(f"runs/{run_id}/checkpoints") if committed.search(k)], 600,
          "a committed checkpoint of the run", every=0.5)  # fmt: skip
    holder = current_lease(store, run_id)  # the process running the flow holds the run's lease
    proc = psutil.Process(holder.pid)
    assert proc in psutil.Process(stack.worker.pid).children(recursive=True)  # the worker's flow-run process
    proc.send_signal(signal.SIGKILL)
    killed_at = time.time()
    assert not store.list(f"runs/{run_id}/adapter"), "the run had finished training before it was killed"
    state = _wait(lambda: (s := _runs(stack.env, "unattended-kill")[0].state) and s.is_final() and s, 120,
                  "Prefect to report the killed run")  # fmt: skip
    record = store.get_json(f"runs/{run_id}/record/run.json")["config"]
    (stack.tmp / "killed.yaml").write_text(yaml.safe_dump(record))
    return SimpleNamespace(run_id=run_id, state=state, pid=proc.pid, killed_at=killed_at, store=store)


def test_a_killed_run_is_found_by_resume_last_resumed_by_one_process_and_a_second_resumer_refused(stack, killed):
    assert killed.state.name == "Crashed", killed.state
    c = tracking.client(stack.env["MLFLOW_TRACKING_URI"])
    mlrun = c.search_runs([c.get_experiment_by_name(NAME).experiment_id],
                          filter_string=f"tags.`{tracking.RUN_TAG}` = '{killed.run_id}'")[0]  # fmt: skip
    # the worker saw its flow-run process die and ran the flow's crash hook: the MLflow run is FAILED at once. The
    # lease it cannot give back (the dead process held it) is found by its stale heartbeat
    failed = _wait(lambda: (r := c.get_run(mlrun.info.run_id)).info.status == "FAILED" and r, 60,
                   "the worker's crash hook to mark the MLflow run FAILED")  # fmt: skip
    assert "SIGKILL" in failed.data.tags.get(tracking.FAILURE_TAG, ""), failed.data.tags  # Prefect's crash message
    lease = current_lease(killed.store, killed.run_id)
    assert lease.pid == killed.pid and not lease.released
    _wait(lambda: current_lease(killed.store, killed.run_id).stale(), 30, "the killed run's heartbeat to go stale")
    resumer = _essaflow(["run", "killed.yaml", "--resume", "last", "--no-progress"], stack.env, stack.tmp)
    held = _wait(lambda: (x := current_lease(killed.store, killed.run_id)) and x.pid == resumer.pid and x, 300,
                 "the resumer to take the lease", every=0.5)  # fmt: skip
    second = _essaflow(["run", "killed.yaml", "--resume", killed.run_id, "--no-progress"], stack.env, stack.tmp)
    rc2, line2, _ = _finished(second)
    rc, line, err = _finished(resumer)
    assert rc == 0, err[-3000:]
    assert line["run_id"] == killed.run_id and line["state"] == "completed"
    assert line["training"]["resumed_from"] is not None and line["training"]["steps"] == 48
    assert rc2 == 1 and f"pid {resumer.pid}" in line2["error"] and held.host in line2["error"], line2
    assert "since" in line2["error"] and line2["resume"] is None
    mlrun = c.get_run(mlrun.info.run_id)
    assert mlrun.info.status == "FINISHED" and current_lease(killed.store, killed.run_id).released
    print(f"killed run {killed.run_id[:8]}: Prefect {killed.state.name}; resumed by pid {resumer.pid} from "
          f"{line['training']['resumed_from']}; second resumer refused: {line2['error'][:160]}")  # fmt: skip


def test_a_failed_scheduled_run_and_the_crashed_one_reach_the_webhook(stack, deployed, killed):
    t0 = time.monotonic()
    due_s = (deployed.broken_at - datetime.now(timezone.utc)).total_seconds()
    try:
        run = _wait(lambda: [r for r in _runs(stack.env, "unattended-broken") if r.state and r.state.is_final()],
                    max(due_s, 0) + 300, "the broken deployment's scheduled run to end", every=2)[0]  # fmt: skip
        assert run.state.name == "Failed" and run.auto_scheduled
        hit = stack.receiver.wait_for(run.name, 120)
        late_s = time.time() - run.end_time.timestamp()
    finally:
        _stop_schedule(stack.env, "unattended-broken")
    assert "Failed" in hit["subject"] and "unattended-broken" in hit["text"] and "no run 'no-such-run'" in hit["text"]
    crashed = stack.receiver.wait_for("of deployment unattended-kill", 30)
    assert "Crashed" in crashed["subject"], stack.receiver.bodies
    print(f"webhook: {hit['subject']!r} seen {late_s:.1f}s after the run ended ({time.monotonic() - t0:.0f}s after "
          f"the test began); "
          f"crashed: {crashed['subject']!r}")  # fmt: skip
    assert os.environ.get("PREFECT_API_URL") != stack.env["PREFECT_API_URL"]  # this process was never pointed at it
