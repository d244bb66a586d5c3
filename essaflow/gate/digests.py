"""What "the same problems under the same protocol" means: two digests a challenger's and a champion's evaluations
must share before the gate pairs them, and that a registered version records so a later run can reuse its counts
(essaflow/gate/champion.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from essaflow.data.schema import Problem
from essaflow.judging.config import EvalConfig


def protocol_digest(eval_cfg: EvalConfig, sampling: Any) -> str:
    """Digest of what decides a problem's outcomes: n, the sampling seed and its stream (eval.shared_prompt), the
    reward (its name or function, the digest of its source, the correctness threshold, the sandbox of a reward that
    runs code: a reward file moved elsewhere is the same protocol, one edited is not) and the sampling settings that
    change completions (temperature, top_p, max_new_tokens); not ks (read off the counts) nor saved samples."""
    body = {
        "samples_per_problem": eval_cfg.samples_per_problem,
        "seed": eval_cfg.seed,
        "shared_prompt": eval_cfg.shared_prompt,
        **eval_cfg.judged_with(),
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_new_tokens": sampling.max_new_tokens,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def problems_digest(problems: Sequence[Problem]) -> str:
    """Digest of the judged problems (id, prompt, reference answer), independent of their order."""
    rows = sorted(json.dumps([p.id, p.prompt, p.answer], ensure_ascii=False) for p in problems)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]
