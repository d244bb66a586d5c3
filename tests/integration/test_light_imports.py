"""Reading a config and the commands that never load a model stay free of torch and transformers: `essaflow --help`
and `essaflow check-config` answer in about a second (a torch and transformers import costs about ten on 2 cores).
Each check imports in a fresh interpreter (a subprocess), so this is an integration test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "peft", "vllm", "ray", "mlflow", "prefect")


def _imported(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_the_pipeline_config_and_a_preset_load_without_torch():
    assert _imported("from essaflow.config import load_config\nload_config('configs/tiny-essa.yaml')") == []


def test_the_cli_and_check_config_start_without_torch():
    code = (
        "from typer.testing import CliRunner\nfrom cli.main import app\n"
        "r = CliRunner().invoke(app, ['check-config', '-c', 'configs/tiny-essa.yaml'])\n"
        "assert r.exit_code == 0, r.output"
    )
    assert _imported(code) == []


def test_tracking_the_gate_and_the_flows_import_without_torch():
    # the gate reads reports and the model registry's tags, gc deletes storage; `prefect deploy` imports every flow,
    # and a task body imports the model stack where it runs
    code = "import essaflow.tracking, essaflow.gate.register, flows.gc, flows.finetune, flows.compare, flows.evaluate"
    assert [m for m in _imported(code) if m in ("torch", "transformers", "peft")] == []


def test_the_cluster_module_imports_neither_prefect_nor_ray_nor_torch():
    assert [m for m in _imported("import essaflow.cluster") if m in ("prefect", "ray", "torch")] == []
