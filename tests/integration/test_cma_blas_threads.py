"""CMA-ES replicas agree bitwise whatever the BLAS thread count: each count runs in its own interpreter (BLAS reads its
thread settings once, at import), so this starts processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

_RUN_CMA = """
import hashlib, sys
import numpy as np
from essaflow.essa.strategy import CMAStrategy
s = CMAStrategy(448, 32, 0.3, seed=0)
rng = np.random.default_rng(1)
for _ in range(8):
    x = s.ask()
    s.tell(x, x @ rng.standard_normal(448))
print(hashlib.sha256(s.mean.tobytes() + s.ask().tobytes()).hexdigest())
"""


def test_cma_replicas_agree_bitwise_whatever_the_blas_thread_count():
    """The driver runs with the machine's BLAS threads, Ray actors with one: the strategy must not care (else seed
    mode resyncs every generation, docs/algorithms.md sec. 2.8)."""
    digests = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        out = subprocess.run([sys.executable, "-c", _RUN_CMA], env=env, capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1, digests
