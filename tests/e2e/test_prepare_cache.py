"""The prepare flow's dataset cache follows the file's bytes: rerun unchanged -> a cache hit (the task body does not
run); the file rewritten at the same path, size and mtime -> a miss and a new dataset hash. Prefect's temporary
local API, file:// storage, in a subprocess of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path

    from tests.support.waiting import wait_until

    import essaflow.stages.data as stage
    from cli.common import service_env

    service_env()
    runs = []
    real = stage.prepare_data
    stage.prepare_data = lambda *a: runs.append(1) or real(*a)  # counts task bodies that ran (they call it)

    from essaflow.config import DataConfig
    from flows.prepare import prepare

    path, store = Path(sys.argv[1]), sys.argv[2]
    data = DataConfig(source="file", path=str(path), adapter="gsm8k", eval_size=2)
    first = prepare(data, store)
    again = prepare(data, store)
    st = path.stat()
    text = path.read_text()
    assert '#### 1"' in text

    def rewritten():  # same size: one digit for another; again until the ctime ticks (a write in its tick keeps it)
        path.write_text(text.replace('#### 1"', '#### 7"'))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return path.stat().st_ctime_ns != st.st_ctime_ns

    wait_until(rewritten, 5, "a new ctime on the data file", every=0.001)
    changed = prepare(data, store)
    print(json.dumps({"hashes": [first.hash, again.hash, changed.hash], "runs": len(runs)}))
    """
)


def test_a_changed_data_file_at_the_same_path_never_hits_the_old_dataset_cache(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": f"q{i}?", "answer": f"w\n#### {i}"}) + "\n" for i in range(8)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "ESSAFLOW_S"))}
    env.update({"PREFECT_HOME": str(tmp_path / "prefect-home"), "PYTHONPATH": str(REPO)})
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(data), (tmp_path / "store").as_uri()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    first, again, changed = out["hashes"]
    assert first == again and changed != first
    assert out["runs"] == 2  # the first run and the changed file; the unchanged rerun was a cache hit
