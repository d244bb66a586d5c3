"""Bad input is refused before any compute with one `error:` line naming the file (or `--set` word), line, column or
field, and `essaflow run` still prints its JSON line last; URI passwords stay out of what is printed and stored."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import typer
from typer.testing import CliRunner

import cli.pipeline
from cli.main import app
from essaflow.checks.preflight import check_inputs
from essaflow.config import ConfigError, load_config
from essaflow.model.loading import resolve_model_path
from essaflow.runs.journal import Journal
from tasks import failures
from tasks.retry import note_bad_input, retry_policy
from tests.support.stub_checkpoints import stub_checkpoint

PASSWORD = "hunter2-very-secret"
TRACKING = f"http://alice:{PASSWORD}@mlflow.example:5000"


@pytest.fixture(autouse=True)
def no_compute(monkeypatch):
    """Every case here must be refused before the flow starts."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the flow started")

    monkeypatch.setattr(cli.pipeline, "finetune_summary", refuse)


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def _one_error(result) -> str:
    """The single error line of a refused command; no traceback on either stream."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, AssertionError), result.output
    errors = _errors(result)
    assert len(errors) == 1, result.output
    return errors[0]


def _run(*args: str):
    """`essaflow run`, refused: its one error line and its JSON line, which is the last line on stdout."""
    result = CliRunner().invoke(app, ["run", *args, "--no-progress"])
    line = _one_error(result)
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["stage"] == "config" and last["resume"] is None and last["run_id"] is None
    return line, last


BAD_YAML = {
    "tab.yaml": ("name: x\nmodel:\n\tlora_rank: 4\n", "line 3, column 1: YAML syntax error: found character '\\t'"),
    "brace.yaml": ("name: x\nmodel: {lora_rank: 4\nseed: 1\n", "line 3, column 5: YAML syntax error: expected ','"),
}


@pytest.mark.parametrize("name", sorted(BAD_YAML))
def test_a_yaml_syntax_error_names_the_file_line_and_column(tmp_path, name):
    text, expected = BAD_YAML[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^{re.escape(str(path))}: ") as err:
        load_config(path)
    assert expected in str(err.value) and "\n" not in str(err.value)
    assert _one_error(CliRunner().invoke(app, ["check-config", "-c", str(path)])) == f"error: {err.value}"
    line, last = _run(str(path))
    assert line == f"error: {err.value}" and last["error"] == str(err.value)


def test_a_syntax_error_in_an_extended_file_names_that_file(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: [1\n")
    (tmp_path / "top.yaml").write_text("extends: base.yaml\nname: x\n")
    base = re.escape(str(tmp_path / "base.yaml"))
    with pytest.raises(ConfigError, match=f"^{base}: line 2, column 1: YAML syntax error"):
        load_config(tmp_path / "top.yaml")


@pytest.mark.parametrize(
    ("word", "column"),
    [("model.target_modules=[q_proj", 29), ("data.columns={prompt: q", 24), ("name='unclosed", 15)],
)
def test_a_malformed_set_literal_names_the_word_and_column(tmp_path, word, column):
    with pytest.raises(ConfigError) as err:
        load_config(None, [word])
    assert str(err.value).startswith(f"--set {word!r}: line 1, column {column}: YAML syntax error: ")
    preset = tmp_path / "p.yaml"
    preset.write_text("name: x\n")
    line, _ = _run(str(preset), "--set", word)
    assert line == f"error: {err.value}"


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("data.prompt_template=Q: {prompt}", "Q: {prompt}"),  # ": " is text, not a mapping
        ("data.prompt_template=- {prompt}", "- {prompt}"),  # "- " is text, not a list
        ("data.system_prompt=# Answer with a number", "# Answer with a number"),  # not a YAML comment
        ("model.revision='1234'", "1234"),  # a quoted literal stays a string
        ("data.prompt_template={prompt}\nAnswer:", "{prompt}\nAnswer:"),  # a text field: `{` opens no mapping
        ("data.prompt_template=[INST] {prompt} [/INST]", "[INST] {prompt} [/INST]"),  # nor `[` a list
    ],
)
def test_set_values_are_text_unless_they_open_a_literal(word, value):
    key = word.split("=", 1)[0]
    section, field = key.split(".")
    assert getattr(getattr(load_config(None, [word]), section), field) == value


def test_set_values_keep_their_yaml_types():
    cfg = load_config(None, ["essa.population=48", "sft.lr=0.001", "adapter_uri=null", "model.target_modules=[q_proj]"])
    assert (cfg.essa.population, cfg.sft.lr, cfg.adapter_uri) == (48, 0.001, None)
    assert cfg.model.target_modules == ["q_proj"]


@pytest.mark.parametrize(
    ("word", "columns"),
    [
        ("data.columns={prompt:question}", {"prompt": "question"}),  # YAML: the key 'prompt:question', no value
        ("data.columns={prompt:question, answer:final}", {"prompt": "question", "answer": "final"}),
        ("data.columns={prompt: question, answer:final}", {"prompt": "question", "answer": "final"}),
        ("data.columns={prompt:'question'}", {"prompt": "question"}),
    ],
)
def test_a_set_mapping_without_a_space_after_the_colon_is_read_as_meant(word, columns):
    assert load_config(None, [word]).data.columns == columns


def test_a_file_mapping_without_a_space_after_the_colon_says_where_the_space_goes(tmp_path):
    path = tmp_path / "cols.yaml"
    path.write_text("data:\n  columns: {prompt:question}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == ("invalid config: data.columns.prompt:question: Input should be a valid string (YAML "
                              "reads {prompt:question} as the key 'prompt:question' with no value: write {prompt: "
                              "question})")  # fmt: skip


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_config_file_is_refused(tmp_path, text):
    path = tmp_path / "empty.yaml"
    path.write_text(text)
    line = _one_error(CliRunner().invoke(app, ["check-config", "-c", str(path)]))
    assert line == f"error: config file {path} is empty: write the keys it sets (`{{}}` for every default)"
    assert _run(str(path))[0] == line
    (tmp_path / "defaults.yaml").write_text("{}\n")  # every default, said so
    assert load_config(tmp_path / "defaults.yaml").name == "tiny-arith"


def test_a_template_with_an_unknown_placeholder_is_refused(tmp_path):
    line = _one_error(CliRunner().invoke(app, ["check-config", "--set", "data.prompt_template={prompt} {other}"]))
    assert line.startswith("error: invalid config: data.prompt_template: ")
    assert "unknown placeholder(s) {other}: only {prompt} is filled in" in line
    preset = tmp_path / "p.yaml"
    preset.write_text("data:\n  prompt_template: 'Q: {prompt} ({hint})'\n")
    assert "{hint}" in _run(str(preset))[0]
    # the argument of a LaTeX command is text, not a placeholder
    tex = r"Solve: {prompt} Put the answer in \boxed{answer}; \frac{a}{b}"
    assert load_config(None, [f"data.prompt_template={tex}"]).data.prompt_template == tex


def _checkpoint(tmp_path, *files: str):
    return stub_checkpoint(tmp_path / "ckpt", *files)


@pytest.mark.parametrize(
    ("files", "missing"),
    [
        (("tokenizer.json",), "weights (*.safetensors, *.bin"),
        (("model.safetensors",), "tokenizer files (tokenizer.json, tokenizer.model"),
        ((), "weights (*.safetensors, *.bin, *.safetensors.index.json, *.bin.index.json) and no tokenizer files"),
    ],
)
def test_a_model_directory_without_weights_or_tokenizer_is_refused(tmp_path, files, missing):
    ckpt = _checkpoint(tmp_path, *files)
    expected = f"model.name_or_path: {ckpt} has config.json but no {missing}"
    problems = check_inputs(load_config(None, [f"model.name_or_path={ckpt}"]).model, load_config().data).problems
    assert len(problems) == 1 and problems[0].startswith(expected)
    preset = tmp_path / "p.yaml"
    preset.write_text(f"model:\n  name_or_path: {ckpt}\n")
    check = _one_error(CliRunner().invoke(app, ["check-config", "-c", str(preset)]))
    assert check.startswith(f"error: {expected}")
    assert _run(str(preset))[0] == check  # `essaflow run` refuses it before the flow starts
    # a deployment's run (no CLI preflight) fails where the model is first resolved, with a no-retry error
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(expected)}"):
        resolve_model_path(str(ckpt))


def test_a_sharded_checkpoint_with_a_sentencepiece_tokenizer_passes(tmp_path):
    ckpt = _checkpoint(tmp_path, "model.safetensors.index.json", "model-00001-of-00002.safetensors", "tokenizer.model")
    assert resolve_model_path(str(ckpt)) == str(ckpt)
    assert check_inputs(load_config(None, [f"model.name_or_path={ckpt}"]).model, load_config().data).problems == []


def _task_run(name: str = "prepare_dataset"):
    return SimpleNamespace(flow_run_id="flow-1", id=f"task-{name}", name=name, run_count=1)


class _Failed:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def result(self):
        raise self.exc


@pytest.mark.parametrize(
    ("exc", "resumable"),
    [
        (ConfigError("essa.population must be even"), False),
        (FileNotFoundError("model.name_or_path: /m has config.json but no weights"), False),
        (ConnectionResetError("peer reset"), True),  # a server that comes back: a resume can help
    ],
)
def test_bad_input_is_offered_no_resume(exc, resumable):
    assert retry_policy()["on_failure"] == [failures.on_task_failure, note_bad_input]
    task_run = _task_run()
    failures.on_task_failure(None, task_run, _Failed(exc))
    note_bad_input(None, task_run, _Failed(exc))
    failure, _ = failures.pop("flow-1")
    assert failure is not None and failure.final and failure.resumable is resumable


def test_a_failed_run_offers_no_resume_for_bad_input(capsys):
    """The CLI's report of a failed flow run: the resume command only when the failure is resumable."""
    state = SimpleNamespace(
        state_details=SimpleNamespace(flow_run_id="flow-2"), is_completed=lambda: False, message="failed"
    )
    state.result = _Failed(RuntimeError("flow failed")).result
    rerun = ["essaflow", "run", "c.yaml"]
    for exc, offered in ((FileNotFoundError("no weights"), False), (ConnectionError("mlflow down"), True)):
        task_run = SimpleNamespace(flow_run_id="flow-2", id="t", name="build_base_model", run_count=1)
        failures.on_task_failure(None, task_run, _Failed(exc))
        note_bad_input(None, task_run, _Failed(exc))
        Journal("flow-2").working_on("run-1")  # what open_run journals once it holds the run's lease
        with pytest.raises(typer.Exit):
            cli.pipeline.fail_unless_completed(state, rerun)
        last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert last["stage"] == "build_base_model" and last["run_id"] == "run-1"
        assert (last["resume"] == "essaflow run c.yaml --resume run-1") is offered
        assert (last["resume"] is None) is not offered


def test_check_config_masks_uri_passwords():
    result = CliRunner().invoke(
        app, ["check-config", "--set", f"tracking_uri={TRACKING}", "--set", "ray_address=ray://bob:pw-1234@head:10001"]
    )
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output and "pw-1234" not in result.output
    cfg = json.loads(result.stdout[result.stdout.index("{") :])
    assert cfg["tracking_uri"] == "http://alice:***@mlflow.example:5000"
    assert cfg["ray_address"] == "ray://bob:***@head:10001"


def test_the_resume_command_masks_uri_passwords(capsys):
    rerun = cli.pipeline.rerun_command(["run", "c.yaml"], [f"tracking_uri={TRACKING}", "seed=1"])
    with pytest.raises(typer.Exit):
        cli.pipeline.fail("RuntimeError: x", "train", "run-1", rerun)
    out = capsys.readouterr()
    assert PASSWORD not in out.out + out.err
    resume = json.loads(out.out.strip().splitlines()[-1])["resume"]
    assert resume == (
        "essaflow run c.yaml --set 'tracking_uri=http://alice:***@mlflow.example:5000' --set seed=1 --resume run-1"
    )


def test_prefect_stores_no_uri_password_in_the_flow_run_parameters(monkeypatch):
    from flows.finetune import finetune

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "restored-after-the-test")
    cfg = load_config(None, [f"tracking_uri={TRACKING}"])
    given = cli.pipeline.credentials_to_env(cfg)
    stored = json.dumps(finetune.serialize_parameters({"config": given, "resume": None}))
    assert PASSWORD not in stored and given.tracking_uri is None
    # the run reads the same URI from the environment of the process the flow runs in
    from essaflow.tracking import resolve_tracking_uri

    assert resolve_tracking_uri(given.tracking_uri) == TRACKING
    plain = load_config(None, ["tracking_uri=http://mlflow.example:5000"])
    assert cli.pipeline.credentials_to_env(plain) is plain  # nothing to hide: passed as given
