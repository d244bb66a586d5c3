"""`essaflow run` with a reward of yours that calls `os._exit(0)`: the run fails with its JSON line naming the reward
and the problem (before, the command exited 0 with no line and left Prefect's temporary server running), and no
process it started is left behind (the reward's processes, the temporary server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_cli_finetune import TINY
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def marked(marker: str) -> list[str]:
    """The command lines of processes whose environment holds `marker`."""
    found = []
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            if f"ESSAFLOW_TEST_MARK={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
        except OSError:
            continue
    return found


# exits on any completion but the reference answer: the run's preflight (which tries the reward on the reference
# answers) passes it, and the first evaluation meets the exit
EXITS_ON_MODEL_TEXT = """import os

def score(completion, problem):
    if completion.strip() != problem.answer:
        os._exit(0)
    return 1.0
"""


def _run(tmp_path: Path, reward_source: str, marker: str) -> subprocess.CompletedProcess:
    (tmp_path / "exits.py").write_text(reward_source)
    config = {**TINY, "name": "e2e-reward-exits", "eval": {**TINY["eval"], "reward": "exits.py:score"}}
    config["data"] = {**TINY["data"], "eval_size": 4}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "AWS_", "ESSAFLOW_S"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect-home"), "ESSAFLOW_CACHE_DIR": os.environ["ESSAFLOW_CACHE_DIR"],
                "ESSAFLOW_RETRY_BACKOFF_SCALE": "0.01", "ESSAFLOW_TEST_MARK": marker})  # fmt: skip
    return subprocess.run([sys.executable, "-m", "cli.main", "run", "run.yaml", "--no-progress"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip


def test_a_reward_that_always_exits_is_refused_before_prefect_starts(tmp_path):
    marker = uuid.uuid4().hex
    proc = _run(tmp_path, "import os\n\ndef score(completion, problem):\n    os._exit(0)\n", marker)
    assert proc.returncode == 2, proc.stderr[-4000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "the reward's process ended (exit status 0)" in json.dumps(line), line
    assert marked(marker) == []


def test_a_reward_that_exits_fails_the_run_with_its_json_line_and_leaves_no_process(tmp_path):
    marker = uuid.uuid4().hex
    proc = _run(tmp_path, EXITS_ON_MODEL_TEXT, marker)
    assert proc.returncode == 1, proc.stderr[-4000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["stage"].startswith("evaluate"), line
    assert f"reward '{tmp_path / 'exits.py'}:score' failed on problem" in line["error"], line
    assert "the reward's process ended (exit status 0)" in line["error"], line
    # the temporary server is stopped as the command ends
    wait_until(lambda: marked(marker) == [], 30, lambda: f"no process left, still {marked(marker)}", every=0.5)
