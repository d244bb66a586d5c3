"""The real-model smoke tier: SmolLM2-135M-Instruct from PyPI's GGUF, on reasoning-gym and HumanEval, through the
same library paths a run takes (load, chat template, evaluation, F-GRPO steps with a resume, one ESSA generation).

Mechanics, not learning: learning on this model is measured in bench/ (docs/tasks.md).
"""

from __future__ import annotations

import json

import pytest
import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.generation.prompt_format import render_prompt
from essaflow.judging.model_eval import evaluate_adapter
from essaflow.model.gguf import converted_path, gguf_digest, gguf_file
from essaflow.model.identity import model_identity
from essaflow.model.loading import attach_lora, load_base_model, load_tokenizer, resolve_model_path, save_adapter

pytestmark = pytest.mark.realmodel

SMOLLM2 = "builtin:smollm2-135m-instruct"
TASK = '{name: chain_sum, config: {min_terms: 2, max_terms: 2, min_digits: 1, max_digits: 1}}'


def smoke_config(*overrides: str):
    return load_config(None, [
        f"model.name_or_path={SMOLLM2}", "model.lora_rank=4", "model.torch_threads=1",
        "data.source=reasoning_gym", f"data.reasoning_gym.tasks=[{TASK}]", "data.reasoning_gym.size=200",
        "data.eval_size=16", "data.eval_fraction=0.2", "sampling.max_new_tokens=8", "sampling.batch_size=64",
        "eval.samples_per_problem=2", "eval.ks=[1,2]", "method=fgrpo", "grpo.group_size=2",
        "grpo.prompts_per_step=2", "grpo.eval_every=0", "grpo.lr=1e-3", "essa.population=4", "essa.minibatch=4",
        "essa.generations=1", "essa.eval_every=0", "essa.workers.ray=false", "essa.checkpoint_every=0",
        *overrides,
    ])  # fmt: skip


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """The dataset's splits and a start adapter with B != 0 (ESSA needs singular values to search)."""
    cfg = smoke_config()
    root = tmp_path_factory.mktemp("smollm2")
    model = attach_lora(load_base_model(cfg.model), cfg.model, seed=0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.01)
    save_adapter(model, root / "start")
    return prepare_splits(cfg.data), root / "start"


def test_the_gguf_loads_once_by_content_with_its_chat_template_and_eos(start):
    cfg = smoke_config()
    path = resolve_model_path(SMOLLM2)
    assert path == str(converted_path(SMOLLM2, "float32"))  # the cache, named by the file's digest
    assert gguf_digest(SMOLLM2)[:16] in path and model_identity(cfg.model).endswith(gguf_digest(SMOLLM2)[:16])
    assert gguf_file(SMOLLM2).stat().st_size > 90_000_000
    config = json.loads((converted_path(SMOLLM2, "float32") / "config.json").read_text())
    assert config["model_type"] == "llama" and config["hidden_size"] == 576 and "quantization_config" not in config
    tok = load_tokenizer(cfg.model)
    text = render_prompt(tok, "What is 2 + 3?", cfg.data.prompt_format())
    assert text.startswith("<|im_start|>system") and text.endswith("<|im_start|>assistant\n")
    assert tok.convert_ids_to_tokens(json.loads((converted_path(SMOLLM2, "float32") / "generation_config.json")
                                                .read_text())["eos_token_id"]) == "<|im_end|>"  # fmt: skip


def test_evaluates_16_problems_with_the_tasks_verifier(start):
    splits, _ = start
    cfg = smoke_config()
    report = evaluate_adapter(cfg.model, None, splits.eval[:16], cfg.eval, cfg.sampling, cfg.data.prompt_format())
    s = report.summary()
    assert report.num_problems == 16 and 0.0 <= s["pass@1"] <= s["pass@2"] <= 1.0
    assert cfg.eval.reward == "reasoning_gym"


def test_two_fgrpo_steps_resume_from_a_checkpoint(start, tmp_path):
    from essaflow.grpo.loop import train_grpo

    splits, adapter = start
    cfg = smoke_config("grpo.steps=2", "grpo.checkpoint_every=1", "grpo.gamma=0.5")

    class Crash(RuntimeError):
        pass

    def crash_at_2(m):
        if m["step"] == 2:
            raise Crash

    with pytest.raises(Crash):
        train_grpo(cfg, splits, adapter, tmp_path / "out", tmp_path / "ckpt", on_metrics=crash_at_2)
    resumed = train_grpo(cfg, splits, adapter, tmp_path / "out", tmp_path / "ckpt")
    assert resumed.resumed_from == 1 and resumed.steps == 2 and len(resumed.metrics) == 2
    assert (resumed.output_dir / "adapter_model.safetensors").exists()


def test_one_essa_generation_of_population_4(start, tmp_path):
    from essaflow.essa.loop import train_essa

    splits, adapter = start
    cfg = smoke_config("method=essa")
    result = train_essa(cfg, splits, adapter, tmp_path / "out")
    assert result.steps == 1 and (result.output_dir / "adapter_model.safetensors").exists()


def test_essaflow_eval_base_on_humaneval(tmp_path):
    """`essaflow eval --base` through the CLI, Prefect's temporary server and a local MLflow store: pass@1 and
    pass@2 of the base model on 2 HumanEval problems, judged in the sandbox."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "AWS_", "RAY_"))}
    overrides = ["data.eval_size=2", "eval.samples_per_problem=2", "eval.ks=[1,2]", "sampling.max_new_tokens=32"]
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", "eval", "--base", "-c", str(repo / "configs/smollm2-humaneval.yaml"),
         *[a for o in overrides for a in ("--set", o)]],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**keep, "PYTHONPATH": str(repo), "PREFECT_HOME": str(tmp_path / "prefect-home")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = json.loads(proc.stdout.strip().splitlines()[-1])
    assert line["model"] == SMOLLM2 and set(line["pass_at_k"]) >= {"greedy", "pass@1", "pass@2"}
    assert line["judged_with"]["reward"] == "code_tests" and line["judged_with"]["sandbox"] == "bubblewrap"
