"""Generation throughput of the transformers backend on the embedded tiny model, batch sizes side by side.

    .venv/bin/python bench/generation_throughput.py [--repeats 5]

Prints sequences/s and new tokens/s (median over repeats) at batch 1, 64 and 512, sampling at temperature 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from essaflow.config import ModelConfig
from essaflow.data.synthetic import synthetic_problems
from essaflow.generation.sampling import TransformersGenerator
from essaflow.model.loading import load_base_model, load_tokenizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-new-tokens", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = ModelConfig()
    model, tok = load_base_model(cfg), load_tokenizer(cfg)
    params = sum(p.numel() for p in model.parameters())
    print(
        f"tiny model: {params:,} parameters, {model.config.num_hidden_layers} layers, hidden {model.config.hidden_size}"
    )
    prompts = [p.prompt for p in synthetic_problems(512, seed=99)]
    print(f"{'batch':>6} {'seq/s':>10} {'new tok/s':>10}")
    for batch in (1, 64, 512):
        gen = TransformersGenerator(model, tok, batch_size=batch)
        work = prompts[: max(batch, 32)]
        rates, tok_rates = [], []
        for r in range(args.repeats):
            start = time.perf_counter()
            roll = gen.rollout(work, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=r)
            wall = time.perf_counter() - start
            rates.append(len(work) / wall)
            tok_rates.append(int(roll.completion_mask.sum()) / wall)
        print(f"{batch:>6} {statistics.median(rates):>10.0f} {statistics.median(tok_rates):>10.0f}")


if __name__ == "__main__":
    main()
