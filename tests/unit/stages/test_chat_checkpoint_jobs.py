"""Both training jobs on a Qwen-architecture checkpoint with a GSM8K-format file, a few steps each: SFT on the
worked solutions under the chat template, ESSA scoring and GRPO rollouts, pass@k before and after, and each stage's
truncation share in the job's JSON. With a cap of 1 new token a completion ends its turn only by stopping at once,
which a checkpoint trained to answer "#### n<|im_end|>" does not: every share is exactly 1
(tests/unit/generation/test_chat_checkpoint_paths.py measures the share itself). Training here proves no gain: the
learning tests in tests/learning do."""

import pytest

from essaflow.config import load_config
from essaflow.stages.job import run_training_job
from tests.support.real_checkpoints import write_gsm8k_jsonl

METHODS = {
    "essa": ["essa.population=4", "essa.generations=2", "essa.minibatch=8", "essa.eval_every=0", "essa.backend=local"],
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
    shares = out["truncated_share"]
    print(method, "truncated shares", shares)
    assert out["steps"] == 2 and set(out["after"]) >= {"greedy", "pass@1"}
    assert out["judged_with"]["reward"] == cfg.eval.reward and out["judged_with"]["reward_digest"]  # how it was judged
    assert shares["before"] == 1.0 and shares["after"] == 1.0
    assert shares["rollouts"] == (None if method == "essa" else 1.0)  # ESSA samples no rollouts
    memory = out["training"]["memory_per_rank"]  # a LoRA replica: the whole model, the adapter's grads and moments
    if method == "fgrpo":
        assert out["training"]["sharding"] == "ddp" and memory["params"] > memory["grads"] > 0
        assert 2 * memory["grads"] <= memory["optimizer"] < 2.1 * memory["grads"]  # two moments (+ step counts)
    else:
        assert out["training"] == {"sharding": "", "memory_per_rank": {}}
