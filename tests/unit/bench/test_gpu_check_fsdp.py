"""bench/gpu_check.py's fsdp2_bf16 part, on the CPU (gloo): the part a GPU would run, at a size that takes seconds.

FSDP2 with float32 masters and bfloat16 compute keeps its parameters float32 DTensors and changes nearly every
decoder-layer weight at lr 1e-6; the same steps on a plain bfloat16 model change few (their updates round away).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "gpu_check.py"


def test_fsdp2_fp32_masters_move_the_weights_bf16_does_not():
    spec = importlib.util.spec_from_file_location("gpu_check", BENCH)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    out = gpu_check.part_fsdp2_bf16(steps=2, device="cpu", hidden=128, layers=1, seq=16, batch=1)
    assert out["fsdp_param_dtypes"] == ["torch.float32"] and out["fsdp_param_kinds"] == ["DTensor"]
    assert min(out["fsdp_changed_share"]) > 0.95
    assert max(out["bf16_changed_share"]) < 0.2
    assert len(out["fsdp_step_s"]) == len(out["bf16_step_s"]) == 2
