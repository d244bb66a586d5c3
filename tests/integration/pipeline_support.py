"""Helpers of the pipeline tests: tiny budgets, the prefect CLI, flow/task run states, the credential scan."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
POOL = "essaflow-process"

#: The embedded task at test size: 400 problems, 16 held out, 4 samples each, a few SFT/ESSA/GRPO steps.
TINY: dict[str, Any] = {
    "name": "pipeline-test",
    "data": {"synthetic": {"num_problems": 400}, "eval_size": 16},
    "eval": {"samples_per_problem": 4, "ks": [1, 2, 4]},
    "sampling": {"max_new_tokens": 6, "batch_size": 256},
    "sft": {"steps": 10, "batch_size": 16},
    "essa": {"population": 4, "generations": 2, "minibatch": 8, "checkpoint_every": 1, "eval_every": 0},
    "grpo": {"steps": 2, "group_size": 2, "prompts_per_step": 4, "checkpoint_every": 1, "eval_every": 0},
}


def tiny(**over: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(TINY)), **over}


def prefect_cli(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`prefect ...` from the repository root (where prefect.yaml lives)."""
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def ensure_pool(env: dict[str, str]) -> None:
    if prefect_cli("work-pool", "inspect", POOL, env=env).returncode != 0:
        done = prefect_cli("work-pool", "create", POOL, "--type", "process", env=env)
        assert done.returncode == 0, done.stdout + done.stderr


def run_deployment(name: str, params: dict[str, Any], env: dict[str, str], log_dir: Path) -> tuple[str, float, Path]:
    """`prefect deployment run`, then a process worker with --run-once executes it: (flow run id, seconds, log)."""
    t0 = time.monotonic()
    out = prefect_cli("deployment", "run", name, "--params", json.dumps(params), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    flow_run_id = re.search(r"UUID:\s*([0-9a-f-]{36})", out.stdout).group(1)
    log = log_dir / f"worker-{flow_run_id[:8]}.log"
    with open(log, "w") as f:
        worker = subprocess.run(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, "--type", "process", "--run-once"],
            cwd=REPO,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    assert worker.returncode == 0, log.read_text()[-3000:]
    return flow_run_id, time.monotonic() - t0, log


def client():
    from prefect.client.orchestration import get_client

    return get_client(sync_client=True)


def flow_run_state(flow_run_id: str, wait_s: float = 30.0) -> str:
    """Final state name of a flow run (the server records states from events, so wait for a final one)."""
    with client() as c:

        def final() -> str | None:
            state = c.read_flow_run(uuid.UUID(flow_run_id)).state
            return state.name if state is not None and state.is_final() else None

        return wait_until(final, wait_s, f"a final state of flow run {flow_run_id}", every=0.5)


def task_run_states(flow_run_id: str, expect: set[str], wait_s: float = 30.0) -> dict[str, str]:
    """{task run name: state name} of a flow run, waiting until every name in `expect` has a final state."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with client() as c:

        def final() -> dict[str, str] | None:
            runs = c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[uuid.UUID(flow_run_id)])))
            states = {r.name: r.state.name for r in runs if r.state is not None and r.state.is_final()}
            return states if expect <= set(states) else None

        return wait_until(final, wait_s, f"final states of the task runs {sorted(expect)}", every=0.5)


def flow_run_artifacts(flow_run_id: str) -> dict[str, Any]:
    """{artifact key: latest data} of the artifacts a flow run created (tables, markdown, progress)."""
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    flt = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(flow_run_id)]))
    with client() as c:
        return {a.key: a.data for a in c.read_artifacts(artifact_filter=flt) if a.key}


def flow_run_logs(flow_run_id: str) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with client() as c:
        logs = c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])))
    return [entry.message for entry in logs]


def leaks(secrets: list[str], texts: dict[str, str | bytes]) -> list[str]:
    """Where (by label) any secret appears in the given texts or bytes."""
    found = []
    for label, body in texts.items():
        raw = body if isinstance(body, bytes) else body.encode("utf-8", "replace")
        found += [f"{label} contains secret #{i}" for i, s in enumerate(secrets) if s and s.encode() in raw]
    return found
