"""Sandboxed snippets per second: the pool (long-lived bubblewrap workers, a fork per snippet) against one fresh
sandbox per snippet (bwrap and the interpreter started each time), side by side from one run.

    .venv/bin/python bench/sandbox_throughput.py [--snippets 200] [--repeats 5] [--workers 2]

The snippet is a small honest solution (a function and 3 asserts); both ways run `workers` snippets at a time and
every snippet must pass. Prints one JSON line: the median snippets/s of each way over the repeats, their ratio, the
pool's start-up time, and the machine's load average when measured.
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
    argv = [*bwrap_argv(cfg), sandbox_python(cfg), "-I", "-c", SNIPPET]

    def one(_: int) -> int:
        return subprocess.run(argv, capture_output=True, timeout=60, **sandbox_popen_kwargs()).returncode

    start = time.perf_counter()
    with ThreadPoolExecutor(cfg.workers) as threads:
        codes = list(threads.map(one, range(n)))
    rate = n / (time.perf_counter() - start)
    assert codes == [0] * n, codes
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snippets", type=int, default=200, help="snippets per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="measurements of each way (median reported)")
    parser.add_argument("--workers", type=int, default=2, help="pool size, and concurrent fresh sandboxes")
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
        "load_average_1m_5m_15m": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
