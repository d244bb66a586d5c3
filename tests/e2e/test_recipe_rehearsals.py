"""Dress rehearsals of the paper recipes in configs/: `essaflow run <recipe>` end to end (the session's Prefect
server, sqlite MLflow, file:// storage), each with its model swapped for a small locally built Qwen2-architecture
checkpoint (byte-level BPE tokenizer trained by `tokenizers`, Qwen-style chat template, generation_config ending
turns at <|im_end|>) and its data for a small file in the recipe's own format.

Only what a CPU needs is overridden, and every override is listed in CPU_ONLY / tiny_budgets below: the device
(cpu, float32, transformers instead of vLLM, no GPUs for the workers, one Ray worker or rank), and budgets (steps,
population, minibatch, samples, tokens, eval size). Everything else (LoRA rank, alpha, CMA-ES, N = 8, 4
mini-batches, full-parameter F-GRPO, the system prompt, chat template, SFT target, reward, data adapter and
columns) is the recipe's own, so a run here exercises the same code paths a GPU run of the recipe takes. Each test
prints its wall time (pytest -s shows it) and records it as a junit property.

The commands talk to the session's real Prefect server (tests/conftest.py) rather than each starting Prefect's
temporary local API (a server start and a fresh database per command); tests/e2e/test_cli_finetune.py and
test_prepare_cache.py run the CLI on the temporary API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.support.paper_formats import write_deepscaler, write_gsm8k, write_math
from tests.support.real_checkpoints import build_qwen_like

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs"

#: what a machine without a GPU needs, whatever the recipe
CPU_ONLY = [
    "model.device=cpu",
    "model.dtype=float32",
    "sampling.backend=transformers",
]
#: budgets shared by every rehearsal: a few problems, a few samples, short completions
SMALL = [
    "data.eval_size=8",
    "eval.samples_per_problem=4",
    "eval.ks=[1,2,4]",
    "sampling.max_new_tokens=32",
]
ESSA_CPU = [
    "essa.workers.count=1",  # the recipe's 8 GPU workers -> one CPU worker (still a Ray actor)
    "essa.workers.gpus=0",
    "essa.workers.cpus=0.5",
    "essa.population=4",
    "essa.minibatch=4",
    "essa.generations=2",
    "essa.eval_every=1",
    "essa.checkpoint_every=1",
    "sft.steps=4",
]
GRPO_CPU = [
    "grpo.device=cpu",
    "grpo.workers.count=1",  # the recipe's 16 GPU ranks -> one in-process rank
    "grpo.prompts_per_step=16",  # 4 prompt groups per mini-batch: the recipe's 4 mini-batches and N = 8 stay
    "grpo.steps=3",
    "grpo.max_new_tokens=32",
    "grpo.eval_every=1",
    "grpo.checkpoint_every=1",
]


@pytest.fixture(scope="module")
def qwen_checkpoint(tmp_path_factory) -> Path:
    """Qwen2-architecture checkpoint, fine-tuned a few seconds so it ends its turns with <|im_end|>."""
    return build_qwen_like(tmp_path_factory.mktemp("qwen-rehearsal"), train_steps=60)


@pytest.fixture(scope="module")
def prefect_api(prefect_server) -> str:
    return f"{prefect_server.url}/api"


def essaflow(workdir: Path, prefect_api: str, *args: str) -> tuple[dict, float]:
    """One `essaflow` command in workdir (its own Prefect home, MLflow file and store; the session's Prefect
    server); its JSON line, wall time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "AWS_", "ESSAFLOW_S"))}
    env.update({"PREFECT_HOME": str(workdir / "prefect-home"), "ESSAFLOW_CACHE_DIR": os.environ["ESSAFLOW_CACHE_DIR"]})
    env.update({"PREFECT_API_URL": prefect_api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *args], cwd=workdir, env=env, capture_output=True, text=True, timeout=600
    )
    wall = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-4000:]
    for line in proc.stderr.splitlines():
        if "Task run 'train' - train " in line:  # each step's reward, ties, loss: the rehearsal's training log
            print(line.split(" - ", 1)[-1])
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def rehearse(workdir: Path, prefect_api: str, recipe: str, overrides: list[str], record_property) -> tuple[dict, float]:
    sets = [arg for o in overrides for arg in ("--set", o)]
    out, wall = essaflow(workdir, prefect_api, "run", str(CONFIGS / recipe), "--no-progress", *sets)
    shares = truncation_shares(workdir, out["run_id"])
    print(f"\nrehearsal {recipe}: {wall:.1f} s wall (flow {out.get('flow_s')} s, stages {out['stages']}); "
          f"truncated shares {shares}")  # fmt: skip
    record_property(f"rehearsal_wall_s[{recipe}]", round(wall, 1))
    record_property(f"truncated_share[{recipe}]", json.dumps(shares))
    return out, wall


def truncation_shares(workdir: Path, run_id: str) -> dict[str, float]:
    """Share of sampled completions that hit max_new_tokens, before and after training (the eval reports)."""
    shares = {}
    for stage in ("base", "tuned"):
        report = json.loads((workdir / ".essaflow/store/runs" / run_id / "eval" / stage / "passk.json").read_text())
        shares[stage] = report["truncated_share"]
    return shares


def assert_the_pipeline_ran(out: dict, recipe_name: str, steps: int) -> None:
    assert out["model_name"] == recipe_name and out["model_version"] == "1"
    assert {"prepare_dataset", "evaluate-base", "warm_start", "train", "evaluate-tuned", "register"} <= set(
        out["stages"]
    )
    assert out["training"]["steps"] == steps
    assert set(out["after"]) == {"greedy", "pass@1", "pass@2", "pass@4"}


def assert_turns_end_at_im_end(workdir: Path, run_id: str) -> None:
    """The checkpoint ends its turns with <|im_end|>, which only its generation_config names as EOS: most
    completions must stop before the cap, through the recipe's chat template and system prompt."""
    shares = truncation_shares(workdir, run_id)
    assert all(0.0 <= v < 0.5 for v in shares.values()), shares


def test_essa_qwen25_7b_gsm8k_rehearsal(tmp_path, prefect_api, qwen_checkpoint, record_property):
    data = write_gsm8k(tmp_path / "gsm8k.jsonl", 80)
    model = [f"model.name_or_path={qwen_checkpoint}", "data.source=file", f"data.path={data}"]
    sets = model + CPU_ONLY + SMALL + ESSA_CPU
    out, _ = rehearse(tmp_path, prefect_api, "essa-qwen2.5-7b-gsm8k.yaml", sets, record_property)
    assert_the_pipeline_ran(out, "essa-qwen2.5-7b-gsm8k", steps=2)
    assert_turns_end_at_im_end(tmp_path, out["run_id"])
    assert out["training"]["method_label"] == "ESSA(cma, accuracy)"  # the recipe's CMA-ES on the task reward
    assert sum(out["training"]["work_by_node"].values()) == 2 * 4  # candidates scored by the Ray worker (seed sync)
    # the README's third command: the champion again, on the dataset and protocol its tags recorded (no config)
    again, wall = essaflow(tmp_path, prefect_api, "eval", "--model", "essa-qwen2.5-7b-gsm8k", "--alias", "champion")
    print(f"eval of the registered champion: {wall:.1f} s wall, {again['pass_at_k']}")
    assert set(again["pass_at_k"]) == set(out["after"]) and 0.0 <= again["truncated_share"] < 0.5


def test_essa_qwen25_math_7b_math_rehearsal(tmp_path, prefect_api, qwen_checkpoint, record_property):
    data = write_math(tmp_path / "prm800k-math-train.jsonl", 80)
    model = [f"model.name_or_path={qwen_checkpoint}", f"data.path={data}"]  # the recipe reads a file already
    sets = model + CPU_ONLY + SMALL + ESSA_CPU
    out, _ = rehearse(tmp_path, prefect_api, "essa-qwen2.5-math-7b-math.yaml", sets, record_property)
    assert_the_pipeline_ran(out, "essa-qwen2.5-math-7b-math", steps=2)
    assert sum(out["training"]["work_by_node"].values()) == 2 * 4
    assert_turns_end_at_im_end(tmp_path, out["run_id"])


#: the recipe's FSDP ranks on CPU: 2 ranks (gloo) with the recipe's grpo.sharding=fsdp
FSDP_RANKS = ["grpo.sharding=fsdp", "grpo.workers.count=2", "grpo.workers.cpus=0.5"]


def test_fgrpo_qwen25_7b_deepscaler_rehearsal(tmp_path, prefect_api, qwen_checkpoint, record_property):
    # sums of 2..8, so that a few of the barely trained model's rollouts are right (~2%: over 3 steps x 128 rollouts
    # some groups mix right and wrong answers, so the focal-weighted advantages are not all zero); no SFT step (the
    # recipe's sft.enabled: false): RL starts from the checkpoint itself
    data = write_deepscaler(tmp_path / "deepscaler.json", 1300, high=4)
    rows = json.loads(data.read_text())  # the paper's filters: one problem twice with two answers, one long prompt
    long_prompt = "Think. " * 1100 + rows[1]["problem"]  # over 1,024 tokens, under max_prompt_chars
    rows += [{**rows[0], "answer": rows[0]["answer"] + "1"}, {**rows[1], "problem": long_prompt}]
    data.write_text(json.dumps(rows))
    model = [f"model.name_or_path={qwen_checkpoint}", "data.source=file", f"data.path={data}"]
    sets = model + CPU_ONLY + SMALL + GRPO_CPU + FSDP_RANKS
    out, _ = rehearse(tmp_path, prefect_api, "fgrpo-qwen2.5-7b-deepscaler.yaml", sets, record_property)
    assert_the_pipeline_ran(out, "fgrpo-qwen2.5-7b-deepscaler", steps=3)
    assert out["data_filtered"] == {"conflicting_duplicates": 2, "max_prompt_tokens": 1}
    assert out["training"]["sharding"] == "fsdp" and out["training"]["memory_per_rank"]["total"] > 0
    assert_turns_end_at_im_end(tmp_path, out["run_id"])
    # grpo.parameters=full (the recipe's): the result is a whole checkpoint, and every weight moved at lr 1e-6
    trained = load_file(tmp_path / ".essaflow/store/runs" / out["run_id"] / "model" / "model.safetensors")
    base = load_file(qwen_checkpoint / "model.safetensors")
    assert trained.keys() == base.keys()
    assert [name for name in base if torch.equal(base[name], trained[name])] == []
