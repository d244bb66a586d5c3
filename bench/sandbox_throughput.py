"""Sandboxed snippets per second: the pool (long-lived bubblewrap workers, a fork per snippet) against one fresh
sandbox per snippet (bwrap and the interpreter started each time), side by side from one run.

    .venv/bin/python bench/sandbox_throughput.py [--snippets 200] [--repeats 5] [--workers 2]
        [--essa-config configs/tiny-code-essa.yaml --generations 3]

The snippet is a small honest solution (a function and 3 asserts); both ways run `workers` snippets at a time, in
the same sandbox (the interpreter's own files and nothing else of the host), and every snippet must pass. With
--essa-config, it then runs that many ESSA generations of the preset (the code task: its SFT start, cached, then
population x minibatch greedy programs a generation, each run against its hidden tests in the pool) in this process
and times the reward's calls inside each: the sandbox's share of a generation, and the share of snippets answered
from the verdicts already reached (eval.sandbox.memo_size; 0 runs every one). Prints one JSON line: the median
snippets/s of each way over the repeats, their ratio, the pool's start-up time, the share (median over
generations) and the machine's load average when measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from essaflow.sandbox import SandboxConfig, SandboxPool, bwrap_argv, require_bubblewrap
from essaflow.sandbox.bubblewrap import sandbox_popen_kwargs, sandbox_python

SNIPPET = "def add(a, b):\n    return a + b\n\nassert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(2, 2) == 4\n"


def pool_rate(pool: SandboxPool, n: int) -> float:
    start = time.perf_counter()
    outcomes = pool.run([SNIPPET] * n)
    rate = n / (time.perf_counter() - start)
    assert all(o.ok for o in outcomes), [o for o in outcomes if not o.ok][:1]
    return rate


def fresh_rate(cfg: SandboxConfig, n: int) -> float:
    argv = [*bwrap_argv(cfg), sandbox_python(cfg), "-I", "-S", "-c", SNIPPET]  # as the workers start

    def one(_: int) -> int:
        return subprocess.run(argv, capture_output=True, timeout=60, **sandbox_popen_kwargs()).returncode

    start = time.perf_counter()
    with ThreadPoolExecutor(cfg.workers) as threads:
        codes = list(threads.map(one, range(n)))
    rate = n / (time.perf_counter() - start)
    assert codes == [0] * n, codes
    return rate


def sandbox_share_of_essa_generations(config: str, generations: int) -> dict[str, float]:
    """Run `generations` ESSA generations of the preset in this process (one scorer, the transformers engine) and
    time the reward (code_tests: the sandbox pool) within each; the share is judged seconds over generation seconds."""
    from essaflow.config import load_config
    from essaflow.data.prepare import prepare_splits
    from essaflow.essa.population import LocalPopulation
    from essaflow.essa.scoring_spec import scoring_spec
    from essaflow.essa.step import run_generation, start_search
    from essaflow.training.warm_start import cached_sft_adapter

    cfg = load_config(config, [])
    splits = prepare_splits(cfg.data)
    sft = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    population = LocalPopulation(scoring_spec(cfg, splits, sft))
    judge, judged = population.scorer.fitness.reward, [0.0]
    score = judge.score

    def timed_score(completions, problems):  # the one call every fitness path makes per candidate
        start = time.perf_counter()
        try:
            return score(completions, problems)
        finally:
            judged[0] += time.perf_counter() - start

    judge.score = timed_score
    from essaflow.sandbox import shared_memo

    memo = shared_memo(cfg.eval.sandbox)  # the verdicts code_tests keeps: a program written twice runs once
    strategy, sampler = start_search(cfg.essa, population.dimension, len(splits.train))
    shares, walls, fitness = [], [], []
    for g in range(generations):
        judged[0] = 0.0
        done = run_generation(population, strategy, sampler, cfg.essa.seed, g)
        shares.append(judged[0] / done.wall_s)
        walls.append(done.wall_s)
        fitness.append(float(done.fitness.mean()))
    return {
        "essa_config": config,
        "snippets_per_generation": cfg.essa.population * cfg.essa.minibatch * cfg.essa.fitness_samples,
        "generation_s": round(statistics.median(walls), 2),
        "sandbox_share_of_generation": round(statistics.median(shares), 3),
        "fitness_mean": round(statistics.median(fitness), 4),
        "snippets_from_memory": round(
            memo.hits / (generations * cfg.essa.population * cfg.essa.minibatch * cfg.essa.fitness_samples), 3
        ),
        "memo_size": cfg.eval.sandbox.memo_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snippets", type=int, default=200, help="snippets per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each way (median reported)")
    parser.add_argument("--workers", type=int, default=2, help="pool size, and concurrent fresh sandboxes")
    parser.add_argument("--essa-config", default=None, help="also time ESSA generations of this preset's code task")
    parser.add_argument("--generations", type=int, default=3, help="ESSA generations timed (median reported)")
    args = parser.parse_args()
    cfg = SandboxConfig(workers=args.workers)
    require_bubblewrap(cfg)
    start = time.perf_counter()
    with SandboxPool(cfg) as pool:
        pool.run([SNIPPET] * args.workers)  # every worker started and answering
        startup = time.perf_counter() - start
        pooled, fresh = [], []
        for _ in range(args.repeats):  # interleaved: a change of the machine's load hits both ways alike
            pooled.append(pool_rate(pool, args.snippets))
            fresh.append(fresh_rate(cfg, args.snippets))
    result = {
        "snippets": args.snippets,
        "repeats": args.repeats,
        "workers": args.workers,
        "pool_snippets_per_s": round(statistics.median(pooled), 1),
        "fresh_sandbox_snippets_per_s": round(statistics.median(fresh), 1),
        "ratio": round(statistics.median(pooled) / statistics.median(fresh), 2),
        "pool_startup_s": round(startup, 3),
        **(sandbox_share_of_essa_generations(args.essa_config, args.generations) if args.essa_config else {}),
        "load_average_1m_5m_15m": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
