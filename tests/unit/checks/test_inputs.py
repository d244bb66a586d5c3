"""`check-config` checks the inputs a config names, offline: the model path or hub id, the data path, the columns in
the file, the template; each problem one `error:` line naming the field, exit code 2."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from cli.main import app
from essaflow.checks.preflight import check_inputs
from essaflow.config import load_config
from essaflow.data import Problem
from essaflow.data.splits import key_points
from tests.support.stub_checkpoints import stub_checkpoint


def _cfg(*overrides: str):
    return load_config(None, list(overrides))


def _inputs(*overrides: str):
    """check_inputs on the model and data sections of the default config with `overrides`."""
    c = _cfg(*overrides)
    return check_inputs(c.model, c.data)


@pytest.fixture
def ckpt(tmp_path):
    return stub_checkpoint(tmp_path / "ckpt", "model.safetensors", "tokenizer.json")  # looked for; nothing loaded


@pytest.fixture
def gsm8k(tmp_path):
    f = tmp_path / "gsm8k.jsonl"
    f.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"w\n#### {i}"}) + "\n" for i in range(10)))
    return f


def test_the_default_config_passes():
    report = _inputs()
    assert report.problems == [] and any("built-in tiny" in n for n in report.notes)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/no/such/model", "'/no/such/model' does not exist"),
        ("./ckpt-missing", "does not exist"),
        ("not a hub id!", "is neither a local directory nor a hub id"),
        ("s3://bucket-only", "needs a bucket and a key"),
    ],
)
def test_a_model_that_cannot_be_found_is_named(name, problem):
    report = _inputs(f"model.name_or_path={name}")
    assert len(report.problems) == 1 and report.problems[0].startswith("model.name_or_path: ")
    assert problem in report.problems[0]


def test_a_directory_without_config_json_is_no_checkpoint(tmp_path, ckpt):
    assert _inputs(f"model.name_or_path={ckpt}").problems == []
    (ckpt / "config.json").unlink()
    assert "without config.json" in _inputs(f"model.name_or_path={ckpt}").problems[0]


def test_chat_template_always_needs_a_tokenizer_with_one(ckpt):
    problems = _inputs("data.chat_template=always").problems  # the built-in tiny model has none
    assert len(problems) == 1 and problems[0].startswith("data.chat_template: ")
    assert _inputs(f"model.name_or_path={ckpt}", "data.chat_template=always").problems
    (ckpt / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages[0].content }}"}))
    assert _inputs(f"model.name_or_path={ckpt}", "data.chat_template=always").problems == []
    assert _inputs(f"model.name_or_path={ckpt}", "data.chat_template=auto").problems == []


def test_a_hub_id_is_spelling_checked_only():
    report = _inputs("model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct")
    assert report.problems == [] and any("not resolved offline" in n for n in report.notes)


def test_data_path_columns_and_sizes_are_checked(tmp_path, gsm8k):
    base = ["data.source=file", "data.eval_size=2"]
    assert _inputs(*base, f"data.path={gsm8k}", "data.adapter=gsm8k").problems == []
    missing = _inputs(*base, f"data.path={tmp_path / 'nope.jsonl'}").problems
    assert missing == [f"data.path: {tmp_path / 'nope.jsonl'}: data.path does not exist"]
    columns = _inputs(*base, f"data.path={gsm8k}").problems  # plain adapter: no 'prompt' column
    assert "no column 'prompt'" in columns[0] and "columns present: ['question', 'answer']" in columns[0]


def _rows(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p, "answer": str(i)}) + "\n" for i, p in enumerate(prompts)))
    return path


def _prompts(n: int, held_out: bool | None = None, fraction: float = 0.1) -> list[str]:
    """n distinct prompts; with held_out, only ones whose key puts them below (True) or above (False) `fraction`."""
    out, i = [], 0
    while len(out) < n:
        p = f"what is {i} + 1?"
        below = key_points(Problem(id="x", prompt=p, answer="0"))[0] < fraction
        if held_out is None or below == held_out:
            out.append(p)
        i += 1
    return out


@pytest.mark.parametrize("eval_size", [400, 1319])
def test_eval_size_is_a_cap_so_a_small_file_keeps_about_eval_fraction_held_out(tmp_path, eval_size):
    data = _rows(tmp_path / "d.jsonl", _prompts(400))
    report = _inputs("data.source=file", f"data.path={data}", f"data.eval_size={eval_size}")
    assert report.problems == []
    held = int(re.search(r"data: splits sft \d+, train \d+, eval (\d+)", "\n".join(report.notes)).group(1))
    assert 20 <= held <= 60  # ~10% of 400 (data.eval_fraction 0.1), all of them evaluated


def test_a_source_with_nothing_held_out_is_refused_by_check_config_not_later(tmp_path):
    data = _rows(tmp_path / "d.jsonl", _prompts(20, held_out=False))
    sets = ["--set", "data.source=file", "--set", f"data.path={data}", "--set", "data.eval_size=10"]
    result = CliRunner().invoke(app, ["check-config", *sets])
    assert result.exit_code == 2
    assert "error: data: no problem held out: none of the 20 problems has a key below data.eval_fraction=0.1; " \
           "raise data.eval_fraction or name a held-out source (eval.data)" in result.stderr  # fmt: skip
    # held out at 0.5: accepted
    assert CliRunner().invoke(app, ["check-config", *sets, "--set", "data.eval_fraction=0.5"]).exit_code == 0


def test_the_cli_prints_one_error_line_per_problem_and_exits_2(tmp_path, gsm8k):
    runner = CliRunner()
    ok = runner.invoke(app, ["check-config", "--set", "data.source=file", "--set", f"data.path={gsm8k}",
                             "--set", "data.adapter=gsm8k", "--set", "data.eval_size=2"])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["check-config", "--set", "model.name_or_path=/no/model", "--set", "data.source=file",
                              "--set", f"data.path={tmp_path / 'x.csv'}"])  # fmt: skip
    errors = [line for line in bad.output.splitlines() if line.startswith("error: ")]
    assert bad.exit_code == 2 and len(errors) == 2, bad.output
    assert errors[0].startswith("error: model.name_or_path:") and errors[1].startswith("error: data.path:")
    no_path = runner.invoke(app, ["check-config", "--set", "data.source=file"])
    assert no_path.exit_code == 2 and "data.path is required for data.source='file'" in no_path.output
    template = runner.invoke(app, ["check-config", "--set", "data.prompt_template=Solve"])
    assert template.exit_code == 2 and "data.prompt_template" in template.output
    skipped = runner.invoke(app, ["check-config", "--no-inputs", "--set", "model.name_or_path=/no/model"])
    assert skipped.exit_code == 0
