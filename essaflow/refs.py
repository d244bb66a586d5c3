"""The typed references pipeline stages hand each other, and what a finetune run reports at the end.

A stage never passes a big object to the next one. It writes the artifact to the store (see essaflow.artifacts)
and returns one of these: URI + content digest + a little metadata. All are immutable and JSON-serialisable.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Ref(BaseModel):
    """Base of every stage result: immutable, JSON-serialisable, small."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = ""
    """Name of the stage (task run) that produced it."""
    timings: dict[str, float] = {}
    """Seconds spent in this stage: total, and its compute / storage / tracking parts."""
    reused: bool = False
    """Found in storage by its content key, nothing computed (the SFT adapter of an earlier run): the run reports
    the stage under `cached`, as it does the orchestrator's cache hits."""


class RunRef(Ref):
    """One pipeline run: where its artifacts go and which MLflow run records it."""

    run_id: str
    """Pipeline run id (the Prefect flow run id): names runs/<run_id>/ in storage."""
    name: str
    """Pipeline (config) name."""
    storage_uri: str
    """Absolute artifact root."""
    tracking_uri: str
    """MLflow tracking URI."""
    experiment_id: str
    mlflow_run_id: str
    mlflow_url: str | None = None
    """Link to the MLflow run in the MLflow UI (None for a local sqlite file)."""
    flow_run_id: str | None = None
    started_at: float = 0.0
    """Unix time the run opened (for its wall time)."""

    @property
    def run_prefix(self) -> str:
        return f"runs/{self.run_id}"


class DatasetRef(Ref):
    uri: str
    """Directory artifact with {train,eval,sft}.parquet."""
    name: str
    hash: str
    """Content fingerprint of the three splits (the directory name)."""
    config_hash: str
    """Hash of the data config that produced it (the task cache key)."""
    sizes: dict[str, int]
    filtered: dict[str, int] = {}
    """Problems each data filter dropped, by its field (max_prompt_tokens, conflicting_duplicates)."""
    snapshot: dict[str, Any] = {}
    """What was read: {"digest", "sources": [{"role", "source", "digest", "files": {uri: version}}]}
    (essaflow.data.prepare); the digest is `essaflow.data.data_snapshot_digest`'s."""
    excluded: dict[str, int] = {}
    """Problems in no split, by reason: held_out_unused (past data.eval_size), eval_overlap_dropped (also in
    eval.data)."""


class ModelRef(Ref):
    name_or_path: str
    """As configured (e.g. builtin:tiny, a hub id, an s3:// prefix)."""
    local_path: str
    """Resolved checkpoint directory (or hub id) on the machine that resolved it."""
    digest: str
    """Hash of the resolved checkpoint's config files (or the hub id and revision)."""


class TrainingSummary(BaseModel):
    """What training reported about an adapter: built once from the trainer's result (essaflow.training.run), read
    by registration (the method tags), the run's summary and its JSON line (`training`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method_label: str = ""
    """The method variant that trained it, e.g. ESSA(es, accuracy) or F-GRPO(gamma=1)."""
    fitness_kind: str = ""
    """ESSA: black-box reward or gray-box: needs reference answers (empty for other methods)."""
    steps: int = 0
    """Generations (ESSA), optimizer steps (F-GRPO) or SFT steps (the warm start) behind it."""
    resumed_from: int | None = None
    """Step/generation of the checkpoint the last training attempt resumed from (None: it started fresh)."""
    work_by_node: dict[str, int] = {}
    """Ray node (short id) -> ESSA candidates scored there / GRPO worker starts there."""
    worker_failures: int = 0
    """Workers lost while training (ESSA re-dispatched their candidates; GRPO restarted from a checkpoint)."""
    wall_s: float = 0.0
    """Training wall time of the last training call (0 for an adapter that was not trained here)."""
    bytes_per_update: float = 0.0
    """Bytes crossing process boundaries per generation/step (ESSA: seeds and fitness; GRPO: the all-reduce)."""
    sharding: str = ""
    """F-GRPO: ddp (replicas) or fsdp (FSDP2 shards); empty for other methods."""
    memory_per_rank: dict[str, int] = {}
    """F-GRPO: bytes of params, grads, optimizer state and total one rank held (its shards under fsdp)."""
    usage: dict[str, float] = {}
    """What training spent: generated_tokens, forward_tokens, backward_tokens, device_s (essaflow/usage.py)."""

    def metrics_row(self) -> dict[str, Any]:
        """The MLflow `train.summary` row: steps, wall time, bytes per update, nodes used, workers lost, usage
        (`usage_*`), bytes one rank held (`memory_per_rank_*`) and, for a resumed run, where it resumed."""
        row: dict[str, Any] = {
            "steps": self.steps,
            "wall_s": self.wall_s,
            "bytes_per_update": self.bytes_per_update,
            "nodes_used": len(self.work_by_node),
            "worker_failures": self.worker_failures,
            **{f"usage_{k}": v for k, v in self.usage.items()},
            **{f"memory_per_rank_{k}": v for k, v in self.memory_per_rank.items()},
        }
        if self.resumed_from is not None:
            row["resumed_from"] = self.resumed_from
        return row


class AdapterRef(Ref):
    uri: str
    """Directory artifact: a peft adapter (safetensors + adapter_config.json + tokenizer), or a full checkpoint
    when output_kind is full."""
    digest: str
    """Content digest (hash of its manifest's file list)."""
    kind: str
    """sft | essa | fgrpo | none | given."""
    output_kind: str = "lora"
    """lora: a LoRA adapter for the base model; full: a whole fine-tuned checkpoint (F-GRPO grpo.parameters=full)."""
    training: TrainingSummary = TrainingSummary()
    """What training reported (the defaults for an adapter that was not trained here)."""
    metrics_uri: str = ""
    """The trainer's rows, one per generation/step (JSON lines), in storage."""


class EvalRef(Ref):
    uri: str
    label: str
    summary: dict[str, float]
    """greedy and pass@k."""
    num_problems: int
    samples_per_problem: int
    truncated_share: float = 0.0
    """Share of the sampled completions that hit sampling.max_new_tokens (warned above 10%)."""
    judged_with: dict[str, str] = {}
    """The reward, its source digest, the threshold and (for code) the sandbox (EvalConfig.judged_with)."""


class ChampionRef(Ref):
    """The current champion scored on this run's eval problems under this run's protocol (the gate's baseline)."""

    name: str
    version: str
    eval: EvalRef
    """Its pass@k report with per-problem counts (this run's, or its own stored one when reused)."""
    scored: str
    """re-evaluated (in this run) or stored counts (its own report: problem set and protocol digests matched)."""
    problems_digest: str
    protocol_digest: str


class RegisteredRef(Ref):
    name: str
    version: str
    aliases: list[str]
    decision: str
    """Why the promotion gate moved (or did not move) the champion alias."""
    model_uri: str
    """models:/<name>/<version>."""
    gate: dict[str, Any] = {}
    """The gate's evidence (essaflow.gate.evidence.GateEvidence): both scores, the paired difference and its
    interval, the number of problems, the digests, the verdict and its reason."""


class PipelineResult(BaseModel):
    """What a finetune run reports at the end (the CLI prints it as its last JSON line)."""

    run_id: str
    before: dict[str, float]
    """pass@k and greedy of the base model."""
    sft_start: dict[str, float] = {}
    """The same of the adapter training started from (the SFT start): SFT's part is sft_start - before, the
    method's is after - sft_start."""
    after: dict[str, float]
    """The same of the tuned adapter."""
    model_name: str
    model_version: str
    aliases: list[str]
    decision: str
    judged_with: dict[str, str] = {}
    """How before and after were judged: the reward, its source digest, the threshold and, for a reward that runs
    model-written code, the sandbox ('none (unsandboxed ...)' when eval.sandbox is none)."""
    gate: dict[str, Any] = {}
    """The promotion gate's evidence (RegisteredRef.gate): scores, paired difference, interval, verdict, reason."""
    tracking_uri: str
    storage_uri: str
    mlflow_run_id: str
    dataset_uri: str
    adapter_uri: str
    data: dict[str, Any] = {}
    """The data read: snapshot (its digest), files (how many), eval_overlap_dropped, held_out_unused."""
    training: dict[str, Any] = {}
    """The training stage: the adapter's kind and its TrainingSummary (method label, fitness kind, steps,
    resumed_from, work_by_node, worker_failures, wall time, bytes per update, sharding, memory per rank, usage)."""
    data_filtered: dict[str, int] = {}
    """Problems each data filter dropped (data.max_prompt_tokens, data.conflicting_duplicates), as the dataset
    recorded them."""
    stages: dict[str, float]
    """Wall seconds per stage as the orchestrator recorded them (0 for cache hits)."""
    cached: list[str]
    """Stages answered from the task cache, or whose result was found in storage by its content key (`reused`)."""
    flow_s: float
    """Flow wall time up to the final stage."""
    parts: dict[str, float]
    """Seconds inside stages spent on compute, storage and tracking; the rest of flow_s is orchestration."""


class RunInputs(Ref):
    """A run's inputs (essaflow/runs/skip.py) and, when they equal the last completed run's, why it skips."""

    inputs: dict[str, str]
    """{"data": data snapshot digest, "config": config digest, "base": base model identity}."""
    skip_reason: str | None = None
    """Set when nothing is new and the run is not forced: the run ends as skipped with this reason."""
    same_as: str | None = None
    """Run id of the last completed run with the same inputs."""


class SkippedRun(BaseModel):
    """What a run with nothing new reports (the CLI prints it as its last JSON line)."""

    state: str = "skipped"
    reason: str
    run_id: str
    same_as: str | None
    """The last completed run whose inputs this one shares."""
    inputs: dict[str, str]
    mlflow_run_id: str
    tracking_uri: str
    storage_uri: str
    stages: dict[str, float] = {}
    """Wall seconds per stage up to the check (open_run, prepare_dataset, check_inputs)."""
    flow_s: float
    """Flow wall time up to the skip."""
