"""The paper recipes in configs/ pass `essaflow check-config` offline, hold the papers' values, and say where every
value comes from (an inline comment or the comment just above it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.support.paper_formats import write_deepscaler, write_gsm8k, write_math
from tests.support.stub_checkpoints import stub_checkpoint

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
ESSA_GSM8K = CONFIGS / "essa-qwen2.5-7b-gsm8k.yaml"
ESSA_MATH = CONFIGS / "essa-qwen2.5-math-7b-math.yaml"
FGRPO = CONFIGS / "fgrpo-qwen2.5-7b-deepscaler.yaml"
RECIPES = [ESSA_GSM8K, ESSA_MATH, FGRPO]
QWEN25_7B_LAYERS = 28  # Qwen2.5-7B and Qwen2.5-Math-7B (their config.json: num_hidden_layers)


def check_config(*args: str) -> dict:
    """check-config of a recipe written for GPU machines: its config and inputs, not this machine (--no-machine)."""
    result = CliRunner().invoke(app, ["check-config", "--no-machine", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout[result.stdout.index("{") :])


def search_dimension(cfg: dict) -> int:
    """d = layers x adapted matrices x 2 factors x floor(alpha * r) (ESSA-v3 Fig. 1, Alg. 1 line 6)."""
    per_factor = int(cfg["essa"]["alpha"] * cfg["model"]["lora_rank"])
    return QWEN25_7B_LAYERS * len(cfg["model"]["target_modules"]) * 2 * per_factor


_LEAF = re.compile(r"^\s*[a-z_0-9]+: *[^\s#]")  # a key with a value (not a section header)


def _cited(lines: list[str], i: int) -> bool:
    """Line i carries a comment, or a comment line sits right above it or above the run of uncommented values it
    belongs to (one comment citing a group, e.g. Tab. 6's SFT batch, lr and epochs)."""
    if "#" in lines[i]:
        return True
    for line in reversed(lines[:i]):
        if line.strip().startswith("#"):
            return True
        if not _LEAF.match(line) or "#" in line:
            return False  # a section header, or a value whose own comment cites only itself
    return False


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_every_value_in_a_recipe_says_where_it_comes_from(recipe):
    lines = recipe.read_text().splitlines()
    top_level = ("name:", "method:")  # what the file is: its header comment says
    uncited = [
        line.strip()
        for i, line in enumerate(lines)
        if _LEAF.match(line) and not line.startswith(top_level) and not _cited(lines, i)
    ]
    assert uncited == []


def test_essa_gsm8k_is_tab8_qwen25_7b():
    cfg = check_config("-c", str(ESSA_GSM8K))  # hub model and dataset: spelling checked, nothing downloaded
    assert (cfg["model"]["lora_rank"], cfg["essa"]["alpha"], search_dimension(cfg)) == (2, 1.0, 448)
    assert (cfg["essa"]["population"], cfg["essa"]["minibatch"], cfg["essa"]["strategy"]) == (96, 100, "cma")
    assert (cfg["sft"]["batch_size"], cfg["sft"]["lr"], cfg["data"]["eval_size"]) == (16, 1e-4, 1319)
    assert round((8792 - 1319) * cfg["data"]["sft_fraction"]) == 1495  # Tab. 5: SFT 1,495, ESSA 5,978
    assert cfg["model"]["dtype"] == "bfloat16" and cfg["sampling"]["backend"] == "vllm"
    assert cfg["essa"]["workers"] == {**cfg["essa"]["workers"], "count": 8, "gpus": 1.0}
    instruct = check_config("-c", str(ESSA_GSM8K), "--set", "model.name_or_path=Qwen/Qwen2.5-7B-Instruct")
    assert instruct["model"]["name_or_path"] == "Qwen/Qwen2.5-7B-Instruct"


def test_the_readmes_check_config_with_a_gsm8k_file_and_a_local_checkpoint(tmp_path):
    data = write_gsm8k(tmp_path / "gsm8k.jsonl", 1400)
    ckpt = stub_checkpoint(tmp_path / "my-qwen", "model.safetensors", "tokenizer.json")  # looked for, not loaded
    sets = ["--set", "data.source=file", "--set", f"data.path={data}", "--set", f"model.name_or_path={ckpt}"]
    cfg = check_config("-c", str(ESSA_GSM8K), *sets)
    assert cfg["data"]["source"] == "file" and cfg["data"]["adapter"] == "gsm8k"
    assert cfg["model"]["name_or_path"] == str(ckpt)
    # eval_size is a cap, not a share: a 400-row file holds out ~eval_fraction (0.15) of it and trains on the rest
    small = CliRunner().invoke(app, ["check-config", "--no-machine", "-c", str(ESSA_GSM8K), *sets[:-2]] + [
        "--set", f"data.path={write_gsm8k(tmp_path / 'small.jsonl', 400)}"])  # fmt: skip
    assert small.exit_code == 0, small.output
    held = int(re.search(r"data: splits sft \d+, train \d+, eval (\d+)", small.stderr).group(1))
    assert 30 <= held <= 90, small.stderr


def test_essa_math_is_tab8_qwen25_math_7b_and_reads_its_prm800k_file(tmp_path):
    data = write_math(tmp_path / "prm800k-math-train.jsonl", 600)
    cfg = check_config("-c", str(ESSA_MATH), "--set", f"data.path={data}")  # the file read in full, columns checked
    assert (cfg["model"]["lora_rank"], cfg["essa"]["alpha"], search_dimension(cfg)) == (2, 1.0, 448)
    assert (cfg["essa"]["population"], cfg["essa"]["minibatch"]) == (24, 300)
    assert (cfg["sft"]["batch_size"], cfg["sft"]["lr"], cfg["data"]["eval_size"]) == (16, 5e-4, 500)
    assert round((12000 - 500) * cfg["data"]["sft_fraction"]) == 3600  # Tab. 5: SFT 3,600, ESSA 7,900
    assert cfg["model"]["name_or_path"] == "Qwen/Qwen2.5-Math-7B" and cfg["data"]["adapter"] == "math"
    without_file = CliRunner().invoke(app, ["check-config", "-c", str(ESSA_MATH), "--set", "data.path=/no/such.jsonl"])
    assert without_file.exit_code == 2 and "error: data.path:" in without_file.output
    assert CliRunner().invoke(app, ["check-config", "--no-inputs", "-c", str(ESSA_MATH)]).exit_code == 0


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_fgrpo_deepscaler_is_app_l_for_both_gammas(gamma):
    cfg = check_config("-c", str(FGRPO), "--set", f"grpo.gamma={gamma}")
    g = cfg["grpo"]
    assert (g["group_size"], g["prompts_per_step"], g["mini_batches"], g["lr"]) == (8, 256, 4, 1e-6)
    assert (g["kl_beta"], g["aggregation"], g["loss"], g["gamma"]) == (0.0, "token_mean", "grpo", gamma)
    assert (g["clip_eps_low"], g["clip_eps_high"], g["warmup_steps"], g["weight_decay"]) == (0.2, 0.2, 15, 0.01)
    assert (g["temperature"], g["top_p"], g["max_new_tokens"], g["parameters"]) == (1.0, 1.0, 8192, "full")
    assert g["prompts_per_step"] // (g["workers"]["count"] * g["mini_batches"]) == 4  # groups per rank per update
    assert cfg["eval"]["samples_per_problem"] == 1024 and max(cfg["eval"]["ks"]) == 256
    assert cfg["eval"]["reward"] == "math_verify" and cfg["model"]["dtype"] == "bfloat16"


def test_fgrpo_reads_a_local_file_in_deepscalers_format(tmp_path):
    data = write_deepscaler(tmp_path / "deepscaler.json", 300)
    result = CliRunner().invoke(
        app,
        ["check-config", "--no-machine", "-c", str(FGRPO), "--set", "data.source=file", "--set", f"data.path={data}"],
    )
    assert result.exit_code == 0, result.output
    assert "300 problems" in result.output


def test_fgrpo_recipe_starts_rl_from_the_bf16_checkpoint_itself(tmp_path):
    """F-GRPO trains the base model (no SFT): with sft.enabled false the full-parameter policy is the bf16
    checkpoint, bit for bit, and the recipe filters prompts by tokens and drops conflicting duplicates."""
    import torch

    from essaflow.config import load_config
    from essaflow.grpo.learner import build_policy
    from essaflow.model.loading import load_base_model
    from essaflow.training.warm_start import train_sft_adapter
    from tests.support.real_checkpoints import build_qwen_like

    ckpt = build_qwen_like(tmp_path / "qwen")
    cfg = load_config(FGRPO, [f"model.name_or_path={ckpt}", "model.device=cpu"])
    assert cfg.model.dtype == "bfloat16" and not cfg.sft.trains and cfg.grpo.parameters == "full"
    assert cfg.grpo.sharding == "fsdp" and cfg.data.max_prompt_tokens == 1024
    assert cfg.data.conflicting_duplicates == "drop"
    start = train_sft_adapter(cfg.model, cfg.sft, [], tmp_path / "start")
    policy = build_policy(cfg, start, None, torch.device("cpu")).state_dict()
    base = load_base_model(cfg.model).state_dict()
    assert [k for k, v in base.items() if not torch.equal(v, policy[k])] == []
