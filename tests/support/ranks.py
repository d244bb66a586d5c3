"""Run the GRPO loop on N real processes joined by a gloo group on 127.0.0.1, as Ray Train ranks run it.

Ray Train is left out so that tests of the sharded loop start in seconds and can kill one rank at a chosen moment
(`die_saving`: rank 1 exits right after writing its checkpoint shard of that step, before the save completes).
Rank 0's report (the `Finished` event and the checkpoints written) comes back as a dict.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import torch

from devstack import free_port
from essaflow.config import PipelineConfig
from essaflow.data import Splits

TIMEOUT_S = 300
PRELOAD = ["torch", "transformers", "essaflow.grpo.loop", "tests.support.grpo_tiny", "tests.support.ranks"]


def _die_after_writing_shard(step: int) -> None:
    """In this process, exit hard once this rank's shard of checkpoint `step` is on disk."""
    from torch.distributed.checkpoint import filesystem

    write = filesystem.FileSystemWriter.write_data

    def write_then_die(self, plan, planner):
        done = write(self, plan, planner)
        if Path(self.path).parent.name == f".tmp-{step}":
            done.wait()
            os._exit(17)
        return done

    filesystem.FileSystemWriter.write_data = write_then_die


def _rank(rank: int, world: int, port: int, job: dict[str, Any]) -> None:
    import torch.distributed as dist

    import tests.support.grpo_tiny  # noqa: F401  (registers the test reward in this process)
    from essaflow.grpo.loop import run_worker
    from essaflow.grpo.worker_group import WorkerInfo
    from essaflow.grpo.worker_io import CheckpointWritten, Finished, WorkerInputs

    if job["die_saving"] is not None and rank == 1:
        _die_after_writing_shard(job["die_saving"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    report: dict[str, Any] = {"checkpoints": []}

    def emit(event) -> None:
        if rank == 0 and isinstance(event, Finished):
            report.update(dataclasses.asdict(event))
        if rank == 0 and isinstance(event, CheckpointWritten):
            report["checkpoints"].append(Path(event.path).name)

    cfg, splits = job["cfg"], job["splits"]
    info = WorkerInfo(rank, world, torch.device("cpu"))
    run_worker(WorkerInputs(cfg, splits.train, splits.eval, job["start"], job["out"], job["ckpt"]), info, emit)
    dist.destroy_process_group()
    if rank == 0:
        (job["out"] / "report.json").write_text(json.dumps(report))


def run_ranks(
    cfg: PipelineConfig,
    splits: Splits,
    start: Path,
    out: Path,
    ckpt: Path | None,
    world: int = 2,
    die_saving: int | None = None,
) -> dict[str, Any] | None:
    """Train on `world` processes; rank 0's report, or None when a rank died (their exit codes then differ)."""
    out.mkdir(parents=True, exist_ok=True)
    job = {"cfg": cfg, "splits": splits, "start": start, "out": out, "ckpt": ckpt, "die_saving": die_saving}
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # ranks fork from one server that imported these once
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, job)) for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(TIMEOUT_S)
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    if die_saving is None:
        assert codes == [0] * world, f"ranks exited with {codes}"
        return json.loads((out / "report.json").read_text())
    assert codes[1] == 17 and codes[0] != 0, f"ranks exited with {codes}"
    return None
