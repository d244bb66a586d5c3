"""The sandbox's parts that start no process: the program taken from a completion, the packages in the protocol's
digest, the config's refusals and a bwrap_path that is no file. The sandbox itself, on real bubblewrap, is checked in
tests/integration/test_sandbox.py."""

import shutil
from types import SimpleNamespace

import pytest

from essaflow.sandbox import SandboxConfig, SandboxUnavailable, extract_program, require_bubblewrap


def test_extract_program_prefers_a_python_block():
    assert extract_program("x\n```text\nno\n```\n```python\nyes = 1\n```") == "yes = 1\n"
    assert extract_program("see:\n```\nany = 2\n```") == "any = 2\n"
    assert extract_program("```py\ncut = 3") == "cut = 3"  # a truncated answer keeps its code
    assert extract_program("plain = 4") == "plain = 4"


def test_the_packages_are_part_of_the_protocol():
    from essaflow.gate.digests import protocol_digest
    from essaflow.judging.config import EvalConfig

    sampling = SimpleNamespace(temperature=1.0, top_p=1.0, max_new_tokens=64)
    plain = EvalConfig(reward="code_tests")
    assert plain.judged_with()["sandbox"] == "bubblewrap"  # unchanged without packages: old digests still match
    digests = {
        protocol_digest(EvalConfig(reward="code_tests", sandbox={"packages": names}), sampling)
        for names in ([], ["numpy"], ["numpy", "sympy"])
    }
    assert len(digests) == 3
    same = [EvalConfig(reward="code_tests", sandbox={"packages": p}) for p in (["sympy", "numpy"], ["numpy", "sympy"])]
    assert protocol_digest(same[0], sampling) == protocol_digest(same[1], sampling)


def test_hidden_paths_and_bad_package_names_are_refused_by_name():
    from essaflow.config import ConfigError, load_config

    for override, said in (
        ("eval.sandbox.hidden_paths=[/etc]", "eval.sandbox: hidden_paths is gone"),
        ("eval.sandbox.packages=[numpy.linalg]", "eval.sandbox.packages: ['numpy.linalg']: not top-level"),
    ):
        with pytest.raises(ConfigError, match=said.replace(".", r"\.").replace("[", r"\[")):
            load_config(None, [override])


def test_a_wrong_bwrap_path_names_the_field_and_where_bwrap_is(tmp_path):
    wrong = str(tmp_path / "bin" / "bwrap")
    with pytest.raises(SandboxUnavailable) as raised:
        require_bubblewrap(SandboxConfig(bwrap_path=wrong))
    said = str(raised.value)
    assert "eval.sandbox.bwrap_path" in said and wrong in said and shutil.which("bwrap") in said, said
    assert "install the Debian package" not in said
