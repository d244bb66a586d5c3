"""Ray Train launch of the GRPO loop: `cfg.grpo.workers.count` ranks (gloo on CPU, NCCL on GPU), DDP replicas or
FSDP2 shards as `grpo.sharding` says (sharding.py shards inside each rank's loop; Ray Train keeps the process group).

Every worker runs the loop it is handed (`loop.run_worker`) on its own strided share of the prompt groups (a group
never spans workers); torch.distributed is set up by Ray Train's TorchTrainer. Rank 0's reports (metrics,
checkpoints, the final summary) travel to the driver through a Ray queue while `fit()` runs in a background thread,
so the driver's `on_metrics` / `on_checkpoint` see them live. A driver callback that raises stops the relay and is
re-raised once the workers have finished (in-process runs raise at once).

Placement and failures: one bundle per worker (`grpo.workers.cpus`, plus one whole GPU on CUDA) placed by
`grpo.workers.placement_strategy`; the request is checked against the cluster first (ClusterCapacityError, not a hang).
When a worker or its node dies, Ray Train restarts the worker group (`grpo.workers.max_restarts` times) and every rank
resumes from the latest complete checkpoint in `checkpoint_dir`, so on a multi-node cluster that directory must
be on storage all nodes share (the pipeline's train task also syncs each checkpoint to S3 for task retries).

Registry entries named by the config (reward, loss, advantage) are shipped to the workers with the payload, so
estimators or rewards registered only in the driver (a script, a notebook, a test) work on workers too; workers
must still be able to import the module that defines them unless it is `__main__` (cloudpickle by value).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from essaflow import cluster
from essaflow.cluster.request import TrainingRequest, check_fits
from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.data.schema import Problem
from essaflow.grpo.advantages import ADVANTAGES
from essaflow.grpo.losses import LOSSES
from essaflow.grpo.worker_group import WorkerInfo
from essaflow.grpo.worker_io import Emit, RankStarted, RunWorker, WorkerEvent, WorkerInputs
from essaflow.judging.judge import judge_spec
from essaflow.judging.rewards import REWARDS


def _problems_payload(problems: list[Problem]) -> list[dict]:
    return [p.model_dump() for p in problems]


def _ray_worker_entry(config: dict) -> None:
    """Ray Train's train_loop_per_worker: rebuild typed inputs, run the loop, send reports to the driver queue."""
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    for registry, (name, entry) in zip((REWARDS, LOSSES, ADVANTAGES), config["plugins"]):
        if entry is not None:  # a reward of the user's file travels as source, in config["judge"]
            registry.setdefault(name, entry)  # entries registered only in the driver (a script, a notebook, a test)
    cfg: PipelineConfig = config["cfg"]
    if not Path(config["start"]).exists():
        raise FileNotFoundError(cluster.unshared_path_message("GRPO rank", "start adapter", config["start"]))
    info = WorkerInfo(ctx.get_world_rank(), ctx.get_world_size(), ray.train.torch.get_device())
    queue = config["queue"]
    # every rank says where it runs (again after a restart): the driver counts restarts and nodes from these
    queue.put(RankStarted(info.rank, info.world_size, cluster.node_id()))

    def emit(event: WorkerEvent) -> None:
        if info.rank == 0:
            queue.put(event)

    inputs = WorkerInputs(
        cfg,
        [Problem(**p) for p in config["train"]],
        [Problem(**p) for p in config["eval"]],
        Path(config["start"]),
        Path(config["out_dir"]),
        Path(config["checkpoint_dir"]) if config["checkpoint_dir"] else None,
        config["judge"],
    )
    config["run_worker"](inputs, info, emit)


def _loop_config(
    cfg: PipelineConfig, splits: Splits, start: Path, out_dir: Path, ckpt_dir: Path | None, queue, run_worker: RunWorker
):
    """What every rank receives: the loop, the config, the registry entries it names, the problems, paths, the
    relay."""
    return {
        "run_worker": run_worker,
        "cfg": cfg,
        "plugins": [
            (cfg.eval.reward, REWARDS[cfg.eval.reward] if cfg.eval.reward in REWARDS else None),  # noqa: SIM401
            (cfg.grpo.loss, LOSSES[cfg.grpo.loss]),
            (cfg.grpo.advantage, ADVANTAGES[cfg.grpo.advantage]),
        ],
        "judge": judge_spec(cfg.eval),  # the reward's source by value: workers need not see the driver's disk
        "train": _problems_payload(splits.train),
        "eval": _problems_payload(splits.eval),
        "start": str(start),
        "out_dir": str(out_dir),
        "checkpoint_dir": str(ckpt_dir) if ckpt_dir else None,
        "queue": queue,
    }


def run_on_ray(
    cfg: PipelineConfig,
    splits: Splits,
    start: Path,
    out_dir: Path,
    ckpt_dir: Path | None,
    emit: Emit,
    run_worker: RunWorker,
):
    """Launch `cfg.grpo.workers.count` Ray Train DDP workers, each running `run_worker`, and relay rank 0's reports to
    `emit` as they arrive."""
    import ray
    from ray.util.queue import Queue

    if not ray.is_initialized():
        # cfg.ray_address, else RAY_ADDRESS, else a new local Ray (never a stale `ray start` one)
        cluster.connect(cfg.ray_address)
    # device=auto follows the cluster, not the driver: a CPU-only driver pod still trains on the GPU nodes
    # Ray Train waits without end for resources the cluster lacks: say so now, naming what it has
    request = check_fits(cfg.grpo.cluster_request())  # not None: more than one rank, or a one-rank Ray run
    # The relay lives on the head node: a lost worker node must not take rank 0's reports with it. (Not "beside
    # the driver": on a machine running several nodes, a driver may attach to any of them.)
    queue = Queue(actor_options={"num_cpus": 0, "resources": {"node:__internal_head__": 0.001}})
    loop_config = _loop_config(cfg, splits, start, out_dir, ckpt_dir, queue, run_worker)
    trainer = _torch_trainer(request, loop_config, out_dir, cfg.grpo.workers.max_restarts)
    outcome: dict[str, Any] = {}

    def fit() -> None:
        try:
            outcome["result"] = trainer.fit()
        except BaseException as err:  # re-raised in the driver thread below
            outcome["error"] = err

    thread = threading.Thread(target=fit, name="grpo-ray-fit", daemon=True)
    thread.start()
    callback_error = _relay(queue, thread, emit)
    thread.join()
    ray.kill(queue.actor)
    if "error" in outcome:
        raise outcome["error"]
    if callback_error is not None:
        raise callback_error


def _torch_trainer(request: TrainingRequest, loop_config: dict, out_dir: Path, max_restarts: int):
    """Ray Train's TorchTrainer for the checked request: one rank per worker, NCCL on GPUs, else gloo."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = request.gpus > 0
    return TorchTrainer(
        _ray_worker_entry,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=request.workers,
            use_gpu=use_gpu,
            resources_per_worker=request.bundle,
            placement_strategy=request.strategy,
        ),
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        run_config=RunConfig(
            name=f"grpo-{int(time.time() * 1000)}",
            storage_path=str(out_dir.resolve() / "ray"),
            # a lost worker or node restarts the whole group, which resumes from checkpoint_dir (run_worker)
            failure_config=FailureConfig(max_failures=max_restarts),
        ),
    )


def _relay(queue, thread: threading.Thread, emit: Emit) -> BaseException | None:
    """Pass rank 0's events to `emit` until the fit thread ends and the queue is empty. A callback that raises
    stops the relay (later events are dropped) and its error is returned, to be raised once the workers stop."""
    from ray.util.queue import Empty

    callback_error: BaseException | None = None
    while True:
        alive = thread.is_alive()
        try:
            event = queue.get(timeout=0.2)
        except Empty:
            if not alive:
                return callback_error
            continue
        if callback_error is None:
            try:
                emit(event)
            except BaseException as err:  # Ray mode: a driver callback error surfaces once the workers stop
                callback_error = err
