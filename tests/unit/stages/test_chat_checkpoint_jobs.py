"""Both training jobs on a Qwen-architecture checkpoint with a GSM8K-format file, a few steps each: SFT on the
worked solutions under the chat template, ESSA scoring and GRPO rollouts, pass@k before and after, and each stage's
truncation share in what the job stored (its eval reports, the trainer's rows). With a cap of 1 new token a
completion ends its turn only by stopping at once, which a checkpoint trained to answer "#### n<|im_end|>" does not:
every share is exactly 1 (tests/unit/generation/test_chat_checkpoint_paths.py measures the share itself). Training
here proves no gain: the learning tests in tests/learning do."""

import json

import pytest

from essaflow.config import load_config
from essaflow.stages.job import run_training_job
from essaflow.storage import open_store
from tests.support.real_checkpoints import write_gsm8k_jsonl

METHODS = {
    "essa": ["essa.population=4", "essa.generations=2", "essa.minibatch=8", "essa.eval_every=0",
             "essa.workers.ray=false"],
    "fgrpo": ["grpo.steps=2", "grpo.group_size=4", "grpo.prompts_per_step=4", "grpo.eval_every=0",
              "grpo.checkpoint_every=0"],
}  # fmt: skip


@pytest.mark.parametrize("method", sorted(METHODS))
def test_both_jobs_run_on_a_chat_checkpoint_and_report_truncation(method, qwen_trained, tmp_path):
    data = write_gsm8k_jsonl(tmp_path / "gsm8k.jsonl", n=120)
    cfg = load_config(
        None,
        [
            f"method={method}", "data.source=file", f"data.path={data}", "data.adapter=gsm8k", "data.eval_size=16",
            "data.system_prompt='Write the answer after ####.'", f"model.name_or_path={qwen_trained}",
            "model.target_modules=[q_proj,v_proj]", "model.lora_rank=4", "sampling.max_new_tokens=1",
            "eval.samples_per_problem=4", "eval.ks=[1,2,4]", "sft.steps=20", "sft.batch_size=8", "sft.lr=1e-3",
            f"storage_uri=file://{tmp_path}/store", *METHODS[method],
        ],
    )  # fmt: skip
    assert cfg.eval.reward == "math_verify" and cfg.sft.target == "solution"
    out = run_training_job(cfg)
    run, store = f"runs/{out['run_id']}", open_store(out["storage_uri"])
    shares = {
        label: store.get_json(f"{run}/eval/{label}/passk.json")["truncated_share"] for label in ("sft_start", "tuned")
    }
    rows = [json.loads(line) for line in store.get_bytes(f"{run}/train/metrics.jsonl").decode().splitlines()]
    print(method, "truncated shares", shares)
    assert out["training"]["steps"] == 2 and set(out["after"]) >= {"greedy", "pass@1"} and "sft_start" in out
    assert out["judged_with"]["reward"] == cfg.eval.reward and out["judged_with"]["reward_digest"]  # how it was judged
    assert shares == {"sft_start": 1.0, "tuned": 1.0}
    assert [r.get("truncated_share") for r in rows] == ([None] * 2 if method == "essa" else [1.0] * 2)  # ESSA: none
    memory = out["training"]["memory_per_rank"]  # a LoRA replica: the whole model, the adapter's grads and moments
    if method == "fgrpo":
        assert out["training"]["sharding"] == "ddp" and memory["params"] > memory["grads"] > 0
        assert 2 * memory["grads"] <= memory["optimizer"] < 2.1 * memory["grads"]  # two moments (+ step counts)
    else:
        assert (out["training"]["sharding"], out["training"]["memory_per_rank"]) == ("", {})
