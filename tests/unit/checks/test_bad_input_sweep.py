"""The bad-input sweep, config half: every value a config can get wrong is refused at load time with one line that
names the field and says what it takes; no server, no data read, a few seconds in all.

Most cases are generated from the config's own schema, so a new field is swept the day it is added:

- every bound (`ge`, `gt`, `le`, `lt`) of every field, crossed by one step: "<field>: Input should be greater ...";
- every field of fixed choices given a word outside them: "<field>: Input should be 'a', 'b' ...";
- every boolean given a word that is none: "<field>: Input should be a valid boolean";
- every section given a key it does not have: "<section>.<key>: unknown key".

The rest are written out: the cases a sweep of a new user's mistakes found (a model name MLflow would refuse, a
storage or tracking URI no client can use, an empty eval.ks, malformed `--set` words, a data path that cannot be
what its source reads, a YAML key given twice). The files a config names (data, checkpoints) and the machine it
runs on are swept in test_bad_input_files.py.
"""

from __future__ import annotations

import re
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from cli.main import app
from essaflow.config import ConfigError, PipelineConfig, load_config
from essaflow.secrets import scrub

# ------------------------------------------------------------------------------------------ the schema, walked


def _options(annotation: Any) -> tuple[Any, ...]:
    return get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)


def _section(annotation: Any) -> type[BaseModel] | None:
    return next((a for a in _options(annotation) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def _leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, FieldInfo) of every field that holds a value, sections walked into."""
    out = []
    for name, info in model.model_fields.items():
        section = _section(info.annotation)
        out += _leaves(section, f"{prefix}{name}.") if section else [(f"{prefix}{name}", info)]
    return out


def _sections(model: type[BaseModel], prefix: str = "") -> list[str]:
    out = []
    for name, info in model.model_fields.items():
        section = _section(info.annotation)
        if section:
            out += [f"{prefix}{name}", *_sections(section, f"{prefix}{name}.")]
    return out


LEAVES = _leaves(PipelineConfig)
#: what a config-wide value set alongside a case needs (eval.data needs a path before its own fields are read)
NEEDS = {"eval.data.": ["eval.data.path=held.jsonl"]}
STEP = {at.Ge: -1, at.Gt: 0, at.Le: 1, at.Lt: 0}
WORD = {at.Ge: "greater than or equal to", at.Gt: "greater than", at.Le: "less than or equal to", at.Lt: "less than"}


def _is_int(info: Any) -> bool:
    return int in _options(info.annotation) and float not in _options(info.annotation)


def _bound_cases() -> list[tuple[str, str, tuple[str, float]]]:
    """(dotted key, the value one step past the bound, (the words the message must hold, the bound))."""
    cases = []
    for dotted, info in LEAVES:
        for bound in info.metadata:
            kind = type(bound)
            if kind in STEP:
                limit = getattr(bound, kind.__name__.lower())  # Ge(ge=1).ge
                value = limit + STEP[kind] if _is_int(info) else limit + STEP[kind] * 0.5
                cases.append((dotted, repr(value), (f"Input should be {WORD[kind]} ", limit)))
    return cases


def _choice_cases() -> list[str]:
    return [d for d, info in LEAVES if any(get_origin(o) is Literal for o in _options(info.annotation))]


def _bool_cases() -> list[str]:
    return [d for d, info in LEAVES if info.annotation is bool]


def _needs(dotted: str) -> list[str]:
    return [w for prefix, words in NEEDS.items() if dotted.startswith(prefix) for w in words]


def _refused(words: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, words)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


BOUNDS = _bound_cases()


@pytest.mark.parametrize(("dotted", "value", "words"), BOUNDS, ids=[f"{d}={v}" for d, v, _ in BOUNDS])
def test_a_value_past_a_bound_names_the_field_and_the_bound(dotted, value, words):
    message = _refused([*_needs(dotted), f"{dotted}={value}"])
    prefix = f"invalid config: {dotted}: {words[0]}"
    assert message.startswith(prefix) and float(message.removeprefix(prefix)) == words[1], message


@pytest.mark.parametrize("dotted", _choice_cases())
def test_a_word_outside_a_fields_choices_names_the_field_and_its_choices(dotted):
    message = _refused([*_needs(dotted), f"{dotted}=no-such-choice"])
    assert message.startswith(f"invalid config: {dotted}: Input should be '"), message


@pytest.mark.parametrize("dotted", _bool_cases())
def test_a_boolean_given_another_word_names_the_field(dotted):
    message = _refused([*_needs(dotted), f"{dotted}=perhaps"])
    assert message == f"invalid config: {dotted}: Input should be a valid boolean, unable to interpret input"


@pytest.mark.parametrize("section", ["", *_sections(PipelineConfig)])
def test_a_key_a_section_does_not_have_is_called_unknown(section):
    key = f"{section}.no_such_key" if section else "no_such_key"
    assert _refused([*_needs(f"{section}."), f"{key}=1"]) == f"invalid config: {key}: unknown key"


def test_the_generated_sweep_covers_every_constrained_field():
    assert len(BOUNDS) >= 100 and len(_choice_cases()) >= 30 and len(_bool_cases()) >= 10
    constrained = {d for d, info in LEAVES if any(type(b) in STEP for b in info.metadata)}
    assert constrained == {d for d, _, _ in BOUNDS}


# -------------------------------------------------------------------------------------- the cases written out

LONG = "x" * 300
#: (--set words, the one message load_config and check-config give)
WRITTEN = {
    "name-slash": (["name=team/model"], "name: 'team/model' contains '/', which MLflow refuses in a model name; use "
                                        "'team-model'"),
    "name-colon": (["name=a:b"], "name: 'a:b' contains ':', which MLflow refuses in a model name; use 'a-b'"),
    "name-both": (["name=a/b:c"], "name: 'a/b:c' contains '/' and ':', which MLflow refuses in a model name; use "
                                  "'a-b-c'"),
    "name-too-long": ([f"name={LONG}"], "name: is 300 characters long; MLflow's registry holds names of at most 256"),
    "name-blank": (["name='  '"], "name: is empty: it names the MLflow experiment and the registered model"),
    "name-tab": (["name='a\tb'"], "name: 'a\\tb' contains a control character (a line break?); use letters, "
                                  "digits, '-', '_', '.'"),
    "storage-ftp": (["storage_uri=ftp://host/artifacts"], "storage_uri: 'ftp://host/artifacts': unsupported scheme "
                                                          "'ftp': use file://<directory> or s3://<bucket>/<prefix>"),
    "storage-gs": (["storage_uri=gs://bucket/x"], "storage_uri: 'gs://bucket/x': unsupported scheme 'gs': use "
                                                  "file://<directory> or s3://<bucket>/<prefix>"),
    "storage-s3-no-bucket": (["storage_uri=s3://"], "storage_uri: 's3://' names no bucket (letters, digits, '.', "
                                                    "'-'): give s3://<bucket>/<prefix>"),
    "storage-s3-space": (["storage_uri='s3://my bucket/x'"], "storage_uri: 's3://my bucket/x' names no bucket "
                                                             "(letters, digits, '.', '-'): give s3://<bucket>/<prefix>"),
    "storage-file-empty": (["storage_uri=file://"], "storage_uri: 'file://' names no directory"),
    "storage-blank": (["storage_uri=' '"], "storage_uri: is empty: give file://<directory> or s3://<bucket>/<prefix>"),
    "tracking-host-port": (["tracking_uri=localhost:5000"], "tracking_uri: 'localhost:5000' has no scheme: write "
                                                            "http://localhost:5000"),
    "tracking-no-host": (["tracking_uri=http://:5000"], "tracking_uri: 'http://:5000' names no host; use "
                                                        "http://host:port (an MLflow server) or sqlite:///path.db"),
    "tracking-bad-port": (["tracking_uri=http://mlflow:port"], "tracking_uri: 'http://mlflow:port' is malformed "
                          "(Port could not be cast to integer value as 'port'); use http://host:port (an MLflow "
                          "server) or sqlite:///path.db"),
    "tracking-port-range": (["tracking_uri=http://mlflow:99999"], "tracking_uri: 'http://mlflow:99999' is malformed "
                            "(Port out of range 0-65535); use http://host:port (an MLflow server) or "
                            "sqlite:///path.db"),
    "tracking-ipv6": (["tracking_uri=http://[::1"], "tracking_uri: 'http://[::1' is malformed (Invalid IPv6 URL); "
                                                    "use http://host:port (an MLflow server) or sqlite:///path.db"),
    "tracking-one-slash": (["tracking_uri=htp:/x"], "tracking_uri: 'htp:/x' is malformed: a scheme is followed by "
                           "'://'; use http://host:port (an MLflow server) or sqlite:///path.db"),
    "tracking-ftp": (["tracking_uri=ftp://mlflow"], "tracking_uri: 'ftp://mlflow': MLflow has no model registry for "
                     "scheme 'ftp'; use http://host:port (an MLflow server) or sqlite:///path.db"),
    "tracking-file": (["tracking_uri=file:///tmp/mlruns"], "tracking_uri: 'file:///tmp/mlruns': MLflow has no model "
                      "registry for scheme 'file'; use http://host:port (an MLflow server) or sqlite:///path.db"),
    "tracking-dir": (["tracking_uri=./mlruns"], "tracking_uri: './mlruns' is a directory (MLflow's file store), "
                     "which cannot hold a model registry; use http://host:port (an MLflow server) or "
                     "sqlite:///path.db"),
    "tracking-sqlite-two-slashes": (["tracking_uri=sqlite://runs.db"], "tracking_uri: 'sqlite://runs.db': a sqlite "
                                    "URI is sqlite:///relative.db or sqlite:////absolute/path.db"),
    "tracking-password-masked": (["tracking_uri=http://alice:hunter2@:5000"], "tracking_uri: "
                                 "'http://alice:***@:5000' names no host; use http://host:port (an MLflow server) "
                                 "or sqlite:///path.db"),
    "eval-threshold-nan": (["eval.correct_threshold=.nan"], "eval.correct_threshold: Input should be a finite "
                           "number"),
    "eval-threshold-nan-word": (["eval.correct_threshold=nan"], "eval.correct_threshold: Input should be a finite "
                                "number"),
    "eval-reward-timeout-inf": (["eval.reward_timeout_s=.inf"], "eval.reward_timeout_s: Input should be a finite "
                                "number"),
    "eval-reward-timeout-huge": (["eval.reward_timeout_s=1e12"], "eval.reward_timeout_s: Input should be less than "
                                 "or equal to 3600"),
    "eval-ks-empty": (["eval.ks=[]"], "eval: ks is empty: list the k of pass@k to report, e.g. [1] or [1, 4, 16]"),
    "eval-ks-zero": (["eval.ks=[0, 1]"], "eval: ks [0] must be between 1 and samples_per_problem=16"),
    "eval-ks-over-n": (["eval.ks=[32]"], "eval: ks [32] must be between 1 and samples_per_problem=16"),
    "set-no-key": (["=5"], "--set '=5': no key before '='; write section.key=value (e.g. essa.population=48)"),
    "set-blank-key": ([" =5"], "--set ' =5': no key before '='; write section.key=value (e.g. essa.population=48)"),
    "set-empty-part": (["essa..population=4"], "--set 'essa..population=4': an empty part in the key "
                       "'essa..population'; write section.key=value (e.g. essa.population=48)"),
    "set-leading-dot": ([".seed=4"], "--set '.seed=4': an empty part in the key '.seed'; write section.key=value "
                                     "(e.g. essa.population=48)"),
    "set-trailing-dot": (["essa.=4"], "--set 'essa.=4': an empty part in the key 'essa.'; write section.key=value "
                                      "(e.g. essa.population=48)"),
    "set-no-equals": (["essa.population"], "--set 'essa.population' must look like section.key=value"),
    "set-into-a-value": (["seed.x=1"], "seed: Input should be a valid integer"),
    "data-s3-as-file": (["data.source=file", "data.path=s3://bucket/gsm8k.jsonl"], "data: data.path "
                        "'s3://bucket/gsm8k.jsonl' is an s3:// URI but data.source is 'file': set data.source=s3"),
    "data-s3-as-hf": (["data.source=hf", "data.path=s3://bucket/prefix/"], "data: data.path 's3://bucket/prefix/' "
                      "is an s3:// URI but data.source is 'hf': set data.source=s3"),
    "data-jsonl-as-hf": (["data.source=hf", "data.path=gsm8k.jsonl"], "data: data.path 'gsm8k.jsonl' names data "
                         "files, but data.source is 'hf' (a hub dataset id or a save_to_disk directory): set "
                         "data.source=file"),
    "data-parquet-as-hf": (["data.source=hf", "data.path=train.parquet"], "data: data.path 'train.parquet' names "
                           "data files, but data.source is 'hf' (a hub dataset id or a save_to_disk directory): set "
                           "data.source=file"),
    "data-glob-as-hf": (["data.source=hf", "data.path=shards/*"], "data: data.path 'shards/*' names data files, but "
                        "data.source is 'hf' (a hub dataset id or a save_to_disk directory): set data.source=file"),
    "data-local-as-s3": (["data.source=s3", "data.path=gsm8k.jsonl"], "data: data.source=s3 reads s3:// URIs, not "
                         "'gsm8k.jsonl': set data.source=file for a local path"),
    "data-no-path": (["data.source=file"], "data: data.path is required for data.source='file'"),
    "held-out-s3-as-file": (["eval.data={source: file, path: 's3://b/test.jsonl'}"], "eval.data: eval.data.path "
                            "'s3://b/test.jsonl' is an s3:// URI but eval.data.source is 'file': set "
                            "eval.data.source=s3"),
    "held-out-jsonl-as-hf": (["eval.data={source: hf, path: test.jsonl}"], "eval.data: eval.data.path 'test.jsonl' "
                             "names data files, but eval.data.source is 'hf' (a hub dataset id or a save_to_disk "
                             "directory): set eval.data.source=file"),
    "gate-metric-unmeasured": (["gate.metric=pass@64"], "gate.metric 'pass@64' is not measured; choose from "
                               "['greedy', 'pass@1', 'pass@16', 'pass@2', 'pass@4', 'pass@8']"),
    "int4-float32": (["model.quantization=int4"], "model: model.quantization=int4 needs model.dtype=bfloat16 "
                     "(torchao's int4 tinygemm kernel), got float32"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(WRITTEN))
def test_a_mistake_a_new_user_makes_gets_one_line_naming_the_field_and_the_fix(case):
    words, expected = WRITTEN[case]
    message = _refused(words)
    assert message in (expected, f"invalid config: {expected}"), message
    args = [w for word in words for w in ("--set", word)]
    result = CliRunner().invoke(app, ["check-config", "--no-inputs", *args])
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and errors == [f"error: {scrub(message)}"], result.output  # URI user-info masked
    assert "hunter2" not in result.output


# ------------------------------------------------------------------------------------------ YAML given twice


DUPLICATES = {
    "top-level": ("name: a\nseed: 1\nname: b\n", "line 3, column 1: key 'name' given twice (first on line 1)"),
    "nested": ("sft:\n  lr: 0.1\n  steps: 3\n  lr: 0.2\n", "line 4, column 3: key 'lr' given twice (first on line 2)"),
    "section": ("essa:\n  population: 4\nseed: 1\nessa:\n  sigma0: 0.1\n",
                "line 4, column 1: key 'essa' given twice (first on line 1)"),
    "flow-mapping": ("model: {lora_rank: 4, lora_rank: 8}\n",
                     "line 1, column 23: key 'lora_rank' given twice (first on line 1)"),
    "inline-mapping": ("name: a\ndata:\n  columns: {prompt: q, prompt: question}\n",
                  "line 3, column 24: key 'prompt' given twice (first on line 3)"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_a_yaml_key_given_twice_is_refused_naming_the_key_file_and_lines(tmp_path, case):
    text, expected = DUPLICATES[case]
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {expected}; YAML would keep only the last: remove one"
    result = CliRunner().invoke(app, ["check-config", "--no-inputs", "-c", str(path)])
    assert result.exit_code == 2 and f"error: {err.value}" in result.stderr.splitlines()


def test_a_key_given_twice_in_an_extended_base_names_the_base(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: 1\nseed: 2\n")
    (tmp_path / "top.yaml").write_text("extends: base.yaml\nname: x\n")
    base = re.escape(str(tmp_path / "base.yaml"))
    with pytest.raises(ConfigError, match=f"^{base}: line 2, column 1: key 'seed' given twice"):
        load_config(tmp_path / "top.yaml")


def test_the_same_key_in_a_base_and_its_preset_is_no_duplicate(tmp_path):
    (tmp_path / "base.yaml").write_text("seed: 1\nsft: {lr: 0.1}\n")
    (tmp_path / "top.yaml").write_text("extends: base.yaml\nseed: 2\nsft: {lr: 0.2}\n")
    cfg = load_config(tmp_path / "top.yaml")
    assert (cfg.seed, cfg.sft.lr) == (2, 0.2)  # the preset wins, as `extends` says
