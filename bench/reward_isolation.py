"""What isolating a reward of your own costs: its calls in a pool of reward processes (now) against the same function
called in this process, each call in a daemon thread watched by its timeout (before), side by side from one run.

    .venv/bin/python bench/reward_isolation.py [--completions 10000] [--repeats 5]

Two tasks. The arithmetic preset (configs/tiny.yaml's data): a reward file equivalent to the built-in exact_match
(the built-in itself runs in this process as before; its time is printed as the floor). examples/own-task: its
own reward file (reward.py:digit_credit, which takes the problem and returns two components). Each batch is
`--completions` completions over the task's problems (right answers, near misses and non-numbers, in turn), scored
with one Judge.score call, as ESSA's generations and GRPO's steps do; both ways must give the same rewards. Prints
one line per task and way, then one JSON line: the median seconds of each way over the repeats, their ratio, the
microseconds per completion, the reward's start (the first process started and the reward imported, median of
the repeats), the CPU model and the load average when measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from essaflow.config import load_config
from essaflow.data import read_problems
from essaflow.data.schema import Problem
from essaflow.judging.judge import Judge
from essaflow.judging.reward_pool import close_pools
from essaflow.judging.reward_ref import load_reward_function, resolve_reward_ref
from essaflow.judging.reward_worker import as_score, takes_problem

REPO = Path(__file__).resolve().parents[1]
EXACT_MATCH_FILE = '''
def exact(completion: str, reference: str) -> float:
    """The built-in exact_match, as a file of yours."""
    first = completion.strip().split("\\n", 1)[0].strip() if completion.strip() else ""
    return 1.0 if first == reference.strip() else 0.0
'''


def in_process(judge: Judge, completions: list[str], problems: list[Problem], timeout_s: float = 30.0) -> list[float]:
    """Before: the function defined here from its source, each call in a daemon thread watched by its timeout (a
    hung call's thread abandoned, a fresh one for the rest), as essaflow/judging/judge.py called it before rewards
    ran in processes of their own; the values then collected into Scores as the judge does either way."""
    ref = judge.ref.ref
    fn = load_reward_function(resolve_reward_ref(ref))
    args = [(c, p if takes_problem(fn) else p.answer) for c, p in zip(completions, problems)]

    def call(a: tuple[Any, Any]) -> tuple[Any, BaseException | None]:
        try:
            return fn(*a), None
        except Exception as e:  # noqa: BLE001
            return None, e

    results: list[tuple[Any, BaseException | None]] = []
    while len(results) < len(args):
        done: queue.Queue = queue.Queue()
        rest = args[len(results) :]
        threading.Thread(target=lambda q=done, r=rest: [q.put(call(a)) for a in r], daemon=True).start()
        while len(results) < len(args):
            try:
                results.append(done.get(timeout=timeout_s))
            except queue.Empty:
                results.append((None, TimeoutError()))
                break
    scores = [as_score(value) for value, _ in results]
    collected = judge._collect([v if parts is None else (v, parts) for v, parts in scores], problems, completions)
    return collected.rewards


def arithmetic(n: int) -> tuple[list[str], list[Problem]]:
    problems = read_problems(load_config(REPO / "configs" / "tiny.yaml").data).problems[:256]
    return _batch(problems, n)


def own_task(n: int) -> tuple[list[str], list[Problem]]:
    cfg = load_config(REPO / "examples" / "own-task" / "config.yaml")
    data = cfg.data.model_copy(update={"path": str(REPO / "examples" / "own-task" / "problems.jsonl")})
    return _batch(read_problems(data).problems, n)


def _batch(problems: list[Problem], n: int) -> tuple[list[str], list[Problem]]:
    picked = [problems[i % len(problems)] for i in range(n)]
    kinds = (lambda p: p.answer, lambda p: p.answer[:-1] + "9", lambda p: f"{p.answer}\nbecause", lambda p: "no")
    return [kinds[i % len(kinds)](p) for i, p in enumerate(picked)], picked


def timed(fn: Any, repeats: int) -> tuple[float, Any]:
    seconds, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), out


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def measure(task: str, ref: str, batch: tuple[list[str], list[Problem]], repeats: int) -> dict[str, Any]:
    completions, problems = batch
    starts = []
    for _ in range(repeats):  # the reward's start: a fresh pool, its first process, the reward imported
        close_pools()
        start = time.perf_counter()
        judge = Judge(ref)
        starts.append(time.perf_counter() - start)
    before_s, before = timed(lambda: in_process(judge, completions, problems), repeats)
    after_s, after = timed(lambda: judge.score(completions, problems).rewards, repeats)
    assert before == after, "the isolated reward scored differently"
    n = len(completions)
    row = {
        "task": task,
        "completions": n,
        "in_process_s": round(before_s, 4),
        "isolated_s": round(after_s, 4),
        "ratio": round(after_s / before_s, 2),
        "in_process_us_per_completion": round(1e6 * before_s / n, 2),
        "isolated_us_per_completion": round(1e6 * after_s / n, 2),
        "reward_start_s": round(statistics.median(starts), 3),
        "mean_reward": round(sum(after) / n, 4),
    }
    print(f"{task:10s} in-process {before_s:8.4f} s ({row['in_process_us_per_completion']:6.2f} us/completion)   "
          f"isolated {after_s:8.4f} s ({row['isolated_us_per_completion']:6.2f} us/completion)   x{row['ratio']}   "
          f"start {row['reward_start_s']:.3f} s", flush=True)  # fmt: skip
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--completions", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exact = Path(tmp) / "exact_reward.py"
        exact.write_text(EXACT_MATCH_FILE)
        arith = arithmetic(args.completions)
        builtin_s, _ = timed(lambda: Judge("exact_match").score(*arith), args.repeats)
        print(f"{'arithmetic':10s} built-in exact_match, in-process as before: {builtin_s:.4f} s", flush=True)
        rows.append(measure("arithmetic", f"{exact}:exact", arith, args.repeats))
        own = REPO / "examples" / "own-task" / "reward.py"
        rows.append(measure("own-task", f"{own}:digit_credit", own_task(args.completions), args.repeats))
        close_pools()
    print(json.dumps({
        "rows": rows,
        "builtin_exact_match_s": round(builtin_s, 4),
        "repeats": args.repeats,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
