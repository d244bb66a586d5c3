"""Base rates of a real model on reasoning-gym tasks: which task sits where learning has room (pass@1 15-60%).

    .venv/bin/python bench/reasoning_gym_base_rates.py [--problems 48] [--samples 4] [--max-new-tokens 96]

For each candidate task (and config) it generates problems with essaflow's reasoning_gym source, loads the model
through essaflow's loader (SmolLM2-135M-Instruct from its GGUF by default, chat template on) and evaluates with the
pipeline's own protocol and reward (`reasoning_gym`: the task's verifier, correct at 1.0): greedy accuracy, sampled
pass@1 and pass@k at temperature 1, and the share of completions cut at the token cap. One table, printed as
markdown (docs/tasks.md holds the measured one).
"""

from __future__ import annotations

import argparse
import json
import os
import time

CANDIDATES: list[tuple[str, dict]] = [
    ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"],
                          "allow_parentheses": False, "allow_negation": False}),
    ("chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}),
    ("chain_sum", {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}),
    ("leg_counting", {"min_animals": 1, "max_animals": 2, "max_instances": 3}),
    ("letter_counting", {"min_words": 3, "max_words": 5}),
    ("spell_backward", {"min_word_len": 3, "max_word_len": 4}),
    ("simple_equations", {"min_terms": 2, "max_terms": 2, "max_value": 10, "operators": ["+", "-"]}),
    ("number_sorting", {"min_numbers": 3, "max_numbers": 3, "max_decimals": 0, "min_value": 0, "max_value": 50}),
    ("gsm_symbolic", {}),
]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--problems", type=int, default=48)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="comma-separated task names")
    ap.add_argument("--system-prompt", default=None)
    args = ap.parse_args()

    from essaflow.data.config import DataConfig, ReasoningGymConfig
    from essaflow.data.reasoning_gym import reasoning_gym_problems
    from essaflow.generation.config import SamplingConfig
    from essaflow.judging.config import EvalConfig
    from essaflow.judging.model_eval import evaluate_transformers
    from essaflow.model.config import ModelConfig
    from essaflow.model.loading import load_model_with_adapter

    model_cfg = ModelConfig(name_or_path=args.model, torch_threads=args.threads)
    model, tok = load_model_with_adapter(model_cfg, None)
    ks = sorted({1, args.samples})
    eval_cfg = EvalConfig(reward="reasoning_gym", samples_per_problem=args.samples, ks=ks, seed=1234)
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.max_new_tokens, batch_size=256)
    fmt = DataConfig(system_prompt=args.system_prompt).prompt_format()
    only = set(filter(None, args.only.split(",")))
    print(
        f"model {args.model}; {args.problems} problems x {args.samples} samples, max_new_tokens "
        f"{args.max_new_tokens}, reward reasoning_gym (correct at 1.0); CPU {_cpu()}; load {os.getloadavg()[0]:.1f}"
    )
    print(f"| task | config | greedy | pass@1 | pass@{args.samples} | truncated | s |")
    print("|---|---|---|---|---|---|---|")
    for name, config in CANDIDATES:
        if only and name not in only:
            continue
        rg = ReasoningGymConfig(tasks=[{"name": name, "config": config}], size=args.problems)
        problems = reasoning_gym_problems(rg, seed=7)
        start = time.perf_counter()
        report = evaluate_transformers(model, tok, problems, eval_cfg, sampling, fmt)
        s = report.summary()
        print(f"| {name} | `{json.dumps(config)}` | {s['greedy']:.3f} | {s['pass@1']:.3f} | "
              f"{s[f'pass@{args.samples}']:.3f} | {report.truncated_share:.2f} | {time.perf_counter() - start:.0f} |",
              flush=True)  # fmt: skip


def _cpu() -> str:
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return names[0] if names else "unknown"


if __name__ == "__main__":
    main()
