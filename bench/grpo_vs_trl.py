"""Our GRPO trainer against TRL's GRPOTrainer, side by side in one run: step time and learning curve.

Same tiny model, same SFT LoRA start, same train split, same group size (G), same batch (prompts x G
completions per optimizer step, one on-policy step per generation), same lr / weight decay / grad clip / constant
schedule, same loss (PPO clip 0.2, token-mean over the batch: TRL's loss_type="dapo", our grpo + token_mean),
same advantage (group mean and Bessel std: TRL's scale_rewards="group"), no KL, gamma = 0 for ours (plain GRPO;
TRL has no focal weight), activation checkpointing as grpo.activation_checkpointing on both (TRL 1.x turns it on by
default). Ours computes each group's prompt once (grpo.shared_prompt, the default; `--set grpo.shared_prompt=false`
for the per-row path). TRL is a bench-only dependency (`pip install trl`, the `bench` extra).

    .venv/bin/python bench/grpo_vs_trl.py -c configs/tiny-fgrpo.yaml --steps 60

Prints per-step rewards every few steps, then a summary (median step time, the TRL/ours ratio, held-out greedy
and pass@1 after training) and one JSON line last.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from essaflow.config import load_config
from essaflow.data.prepare import prepare_splits
from essaflow.generation.prompt_format import render_prompt
from essaflow.grpo.loop import train_grpo
from essaflow.judging.evaluation import evaluate
from essaflow.judging.judge import judge_for
from essaflow.model.loading import load_adapter, load_base_model, load_tokenizer
from essaflow.training.warm_start import cached_sft_adapter


def held_out(model, tok, problems, cfg) -> dict[str, float]:
    """Greedy, pass@1 and pass@8 on `problems` ({} when there are none: a speed-only run)."""
    from essaflow.generation.sampling import TransformersGenerator

    if not problems:
        return {}
    eval_cfg = cfg.eval.model_copy(update={"samples_per_problem": 8, "ks": [1, 8]})
    rep = evaluate(TransformersGenerator(model.eval(), tok, cfg.sampling.batch_size), problems, eval_cfg, cfg.sampling)
    return {"greedy": rep.greedy, "pass@1": rep.pass_at_k["1"], "pass@8": rep.pass_at_k["8"]}


def run_ours(cfg, splits, sft, out: Path) -> dict:
    result = train_grpo(cfg, splits, sft, out)
    model, tok = load_adapter(load_base_model(cfg.model), result.output_dir), load_tokenizer(cfg.model)
    return {
        "step_s": [m["step_s"] for m in result.metrics],
        "reward": [m["reward_mean"] for m in result.metrics],
        "held_out": held_out(model, tok, splits.eval, cfg),
    }


def run_trl(cfg, splits, sft, out: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    g = cfg.grpo
    tok = load_tokenizer(cfg.model)
    model = load_adapter(load_base_model(cfg.model), sft, trainable=True)
    judge = judge_for(cfg.eval)  # the pipeline's reward, with the problem's fields (reasoning_gym needs its entry)

    def correctness(prompts, completions, row, **_):
        return list(judge.score(completions, [splits.train[i] for i in row]).rewards)

    # the prompt as our engine renders it (the chat template, if the config uses one), so both see the same tokens
    fmt = cfg.data.prompt_format()
    data = Dataset.from_list(
        [{"prompt": render_prompt(tok, p.prompt, fmt), "row": i} for i, p in enumerate(splits.train)]
    )
    args = GRPOConfig(
        output_dir=str(out),
        max_steps=g.steps,
        per_device_train_batch_size=g.prompts_per_step * g.group_size,
        num_generations=g.group_size,
        steps_per_generation=1,
        num_iterations=1,
        max_completion_length=g.max_new_tokens or cfg.sampling.max_new_tokens,
        temperature=g.temperature,
        top_p=g.top_p,
        learning_rate=g.lr,
        lr_scheduler_type="constant",
        weight_decay=g.weight_decay,
        max_grad_norm=g.grad_clip,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        use_cpu=True,
        bf16=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_dropout=True,
        gradient_checkpointing=g.activation_checkpointing,  # TRL 1.x defaults to True: recompute on both or neither
        seed=g.seed,
        dataloader_num_workers=0,
    )
    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            times.append(time.perf_counter() - self.t0)
            print(f"TRL step {len(times)}: {times[-1]:.1f} s", flush=True)

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=correctness,
        args=args,
        train_dataset=data,
        processing_class=tok,
        callbacks=[StepTimer()],
    )
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for noisy in (PrinterCallback, ProgressCallback):  # the summary below is the output
        trainer.remove_callback(noisy)
    torch.set_num_threads(cfg.model.torch_threads)
    trainer.train()
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return {"step_s": times, "reward": rewards, "held_out": held_out(trainer.model, tok, splits.eval, cfg)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-c", "--config", default="configs/tiny-fgrpo.yaml")
    ap.add_argument("--set", action="append", default=[], help="dotted override, e.g. grpo.lr=1e-4")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--print-every", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON summary here")
    ap.add_argument("--held-out", type=int, default=None, help="score the first N held-out problems (0: none)")
    args = ap.parse_args()
    cfg = load_config(args.config, [*args.set, f"grpo.steps={args.steps}", "grpo.gamma=0", "grpo.eval_every=0"])
    if cfg.grpo.loss != "grpo" or cfg.grpo.mini_batches != 1 or cfg.grpo.kl_beta:
        raise SystemExit("the comparison is defined for loss=grpo, mini_batches=1, kl_beta=0")
    torch.set_num_threads(cfg.model.torch_threads)
    splits = prepare_splits(cfg.data)
    sft = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    if args.held_out is not None:  # a speed run on a larger model need not pay for the whole evaluation
        splits = dataclasses.replace(splits, eval=splits.eval[: args.held_out])
    with tempfile.TemporaryDirectory() as tmp:
        before = held_out(load_adapter(load_base_model(cfg.model), sft), load_tokenizer(cfg.model), splits.eval, cfg)
        ours = run_ours(cfg, splits, sft, Path(tmp) / "ours")
        trl = run_trl(cfg, splits, sft, Path(tmp) / "trl")
    print(f"{'step':>5} {'ours reward':>12} {'TRL reward':>11} {'ours s':>7} {'TRL s':>7}")
    for i in range(0, args.steps, args.print_every):
        row = [ours["reward"][i], trl["reward"][i], ours["step_s"][i], trl["step_s"][i]]
        print(f"{i + 1:>5} {row[0]:>12.3f} {row[1]:>11.3f} {row[2]:>7.3f} {row[3]:>7.3f}")
    med = {k: statistics.median(r["step_s"][1:]) for k, r in (("ours", ours), ("trl", trl))}
    summary = {
        "steps": args.steps,
        "batch": f"{cfg.grpo.prompts_per_step} prompts x G {cfg.grpo.group_size}",
        "median_step_s": med,
        "trl_over_ours": round(med["trl"] / med["ours"], 2),
        "before": before,
        "after": {"ours": ours["held_out"], "trl": trl["held_out"]},
        "reward_last10": {k: statistics.mean(r["reward"][-10:]) for k, r in (("ours", ours), ("trl", trl))},
        "reward_curve": {"ours": ours["reward"], "trl": trl["reward"]},
    }
    print(
        f"median step: ours {med['ours']:.3f}s  TRL {med['trl']:.3f}s  (TRL / ours = {summary['trl_over_ours']}x)\n"
        f"held-out before {before}\n  after ours {ours['held_out']}\n  after TRL  {trl['held_out']}"
    )
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
