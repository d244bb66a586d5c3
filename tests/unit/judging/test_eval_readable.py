"""Evaluation you can read: reports keep completions with their reward and truncation,
samples.jsonl.gz carries them, budgets are sized for real models, and a registered version records the dataset
and protocol that `essaflow eval` re-uses."""

import gzip
import json
import logging

from essaflow.artifacts import publish_eval, read_eval_report
from essaflow.config import EvalConfig, PipelineConfig, SamplingConfig, load_config
from essaflow.data import Problem
from essaflow.generation.config import DEFAULT_MAX_NEW_TOKENS, TINY_MAX_NEW_TOKENS
from essaflow.judging.evaluation import evaluate
from essaflow.refs import RunRef
from essaflow.storage import open_store
from essaflow.tracking.protocol import protocol_from_tags, protocol_tags


class Scripted:
    """A generator that answers from a script: completion j of prompt i, truncated when it ends with '...'."""

    def __init__(self, script):
        self.script = script

    def sample(self, prompts, n=1, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0):
        from essaflow.generation.sampling import Samples

        texts = [[self.script[p][j % len(self.script[p])] for j in range(n)] for p in prompts]
        return Samples(texts, [[t.endswith("...") for t in row] for row in texts])


PROBLEMS = [Problem(id="a", prompt="1+1=", answer="2"), Problem(id="b", prompt="2+2=", answer="4")]
SCRIPT = {"1+1=": ["2", "3", "2..."], "2+2=": ["4..."]}


def test_reports_keep_capped_completions_with_reward_and_truncation(caplog):
    cfg = EvalConfig(samples_per_problem=4, ks=[1, 4], reward="exact_match", samples_saved_per_problem=2)
    with caplog.at_level(logging.WARNING, logger="essaflow.generation.sampling"):
        rep = evaluate(Scripted(SCRIPT), PROBLEMS, cfg, SamplingConfig(max_new_tokens=3))
    assert rep.correct_counts == [2, 0] and rep.greedy == 0.5
    assert rep.truncated_share == 5 / 8 and rep.greedy_truncated_share == 0.5 and rep.max_new_tokens == 3
    assert "62% of completions hit the length cap (3 new tokens)" in caplog.text
    a = rep.samples[0]
    assert a["prompt"] == "1+1=" and a["answer"] == "2"
    assert a["greedy"] == {"text": "2", "reward": 1.0, "truncated": False}
    assert a["completions"] == [{"text": "2", "reward": 1.0, "truncated": False},
                                {"text": "3", "reward": 0.0, "truncated": False}]  # fmt: skip
    none_kept = evaluate(Scripted(SCRIPT), PROBLEMS, cfg.model_copy(update={"samples_saved_per_problem": 0}),
                         SamplingConfig(max_new_tokens=3))  # fmt: skip
    assert all(row["completions"] == [] for row in none_kept.samples)


def test_samples_jsonl_holds_the_completions_and_round_trips(tmp_path):
    cfg = EvalConfig(samples_per_problem=2, ks=[1, 2], reward="exact_match")
    rep = evaluate(Scripted(SCRIPT), PROBLEMS, cfg, SamplingConfig(max_new_tokens=3))
    store = open_store(f"file://{tmp_path}/store")
    run = RunRef(run_id="r1", name="t", storage_uri=store.uri, tracking_uri="sqlite:///x", experiment_id="1",
                 mlflow_run_id="m")  # fmt: skip
    ref = publish_eval(store, run, "base", rep, {"eval": cfg.model_dump()})
    with gzip.open(tmp_path / "store" / "runs" / "r1" / "eval" / "base" / "samples.jsonl.gz", "rt") as f:
        lines = [json.loads(line) for line in f]
    assert lines[0]["id"] == "a" and lines[0]["correct"] == 1 and lines[0]["completions"][1]["text"] == "3"
    body = json.loads((tmp_path / "store" / "runs" / "r1" / "eval" / "base" / "passk.json").read_text())
    assert "samples" not in body and body["truncated_share"] == rep.truncated_share
    assert read_eval_report(ref) == rep


def test_budgets_are_sized_for_real_models_and_the_tiny_model_keeps_its_own():
    assert SamplingConfig().max_new_tokens == DEFAULT_MAX_NEW_TOKENS == 512
    assert PipelineConfig().sampling.max_new_tokens == TINY_MAX_NEW_TOKENS  # the built-in tiny model, unset
    real = load_config(None, ["model.name_or_path=/models/qwen"])
    assert real.sampling.max_new_tokens == 512
    assert load_config(None, ["sampling.max_new_tokens=3"]).sampling.max_new_tokens == 3
    for preset in ("configs/tiny.yaml", "configs/tiny-essa.yaml", "configs/tiny-fgrpo.yaml"):
        assert load_config(preset).sampling.max_new_tokens == 6  # presets set it explicitly
    again = PipelineConfig.model_validate(real.model_dump())  # what Prefect and checkpoints re-validate
    assert again.sampling.max_new_tokens == 512


def test_a_version_records_its_dataset_and_protocol_in_tags():
    cfg = load_config(None, ["data.source=file", "data.path=/d/gsm8k.jsonl", "data.adapter=gsm8k",
                             "data.system_prompt=Be brief.", "eval.samples_per_problem=4", "eval.ks=[1,2,4]",
                             "model.name_or_path=/m/qwen"])  # fmt: skip
    tags = {k: str(v) for k, v in protocol_tags(cfg.data, cfg.eval, cfg.sampling).items()}
    recorded = protocol_from_tags({**tags, "unrelated": "x"})
    assert recorded["data"]["path"] == "/d/gsm8k.jsonl" and recorded["data"]["system_prompt"] == "Be brief."
    assert recorded["eval"]["reward"] == "math_verify" and recorded["sampling"]["max_new_tokens"] == 512
    assert protocol_from_tags({}) == {}


def test_cli_eval_without_a_config_uses_the_recorded_protocol(monkeypatch):
    """What `essaflow eval` hands the evaluation flow: the data, eval and sampling its version recorded (--set on top),
    or the defaults for a version that recorded none."""
    from typer.testing import CliRunner

    import cli.pipeline as pipeline
    import essaflow.tracking.protocol as rp
    import flows.evaluate
    from cli.main import app

    cfg = load_config(None, ["data.source=file", "data.path=/d/gsm8k.jsonl", "data.adapter=gsm8k",
                             "model.name_or_path=/m/qwen", "eval.samples_per_problem=4", "eval.ks=[1,2]"])  # fmt: skip
    recorded = protocol_from_tags(protocol_tags(cfg.data, cfg.eval, cfg.sampling))
    handed = []

    class Handed(Exception):
        """Stops the command where the flow would start."""

    def evaluate_model(params, return_state=False):
        handed.append(params)
        raise Handed

    monkeypatch.setattr(flows.evaluate, "evaluate_model", evaluate_model)
    monkeypatch.setattr(pipeline, "service_env", lambda: None)  # the local stack's addresses: not this test's env
    monkeypatch.setattr(rp, "registered_protocol", lambda uri, name, alias: recorded)
    import essaflow.tracking.aliases as aliases

    monkeypatch.setattr(aliases, "registered_version", lambda uri, name, alias: None)  # no registry in this test
    run = CliRunner().invoke(app, ["eval", "--model", "m", "--alias", "champion", "--set", "eval.max_problems=8"])
    assert handed and "Handed" in run.output, run.output  # the flow was called (its error reported in one line)
    out = handed[-1]
    assert out.model_name == "m" and out.alias == "champion"
    assert out.data == cfg.data and out.eval.samples_per_problem == 4 and out.eval.max_problems == 8
    assert out.sampling.max_new_tokens == 512  # the recorded cap, not the tiny model's
    monkeypatch.setattr(rp, "registered_protocol", lambda uri, name, alias: {})
    before = len(handed)
    run = CliRunner().invoke(app, ["eval", "--model", "m"])
    assert len(handed) == before + 1, run.output
    default = load_config(None)
    assert (handed[-1].data, handed[-1].eval, handed[-1].sampling) == (default.data, default.eval, default.sampling)
