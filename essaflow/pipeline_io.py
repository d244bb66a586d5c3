"""What pipeline stages hand each other: small typed references to artifacts in storage, and their readers/writers.

A stage never passes a big object to the next one. It writes the artifact to the store (atomically, manifest last,
SHA-256 per file; see `essaflow.storage`) and returns a reference: URI + content digest + a little metadata. The
next stage, possibly on another machine or in a retried process, downloads and verifies it. Layout (architecture):

    datasets/<name>/<hash>/{train,eval,sft}.parquet, info.json, manifest.json
    adapters/sft/<key>/...                       SFT warm start, addressed by its inputs' hash
    runs/<run_id>/checkpoints/<step>/data/...    trainer checkpoints, synced as they are written
    runs/<run_id>/adapter/                       the tuned adapter
    runs/<run_id>/eval/<label>/{samples.jsonl.gz, passk.json, passk.png}

Nothing read back executes code: Parquet, JSON and safetensors only. This module never imports prefect.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from essaflow.config import DataConfig, PipelineConfig
from essaflow.data import Problem, Splits
from essaflow.evaluation import EvalReport, plot_pass_at_k
from essaflow.storage import MANIFEST, ArtifactStore, StorageError, open_store
from essaflow.tiny_model import cache_root

SPLITS = ("sft", "train", "eval")
CHECKPOINT_DATA = "data"  # runs/<run_id>/checkpoints/<step>/data/ holds the trainer's own files


# ------------------------------------------------------------------------------------------------ references


class Ref(BaseModel):
    """Base of every stage result: immutable, JSON-serialisable, small."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    stage: str = ""
    """Name of the stage (task run) that produced it."""
    timings: dict[str, float] = {}
    """Seconds spent in this stage: total, and its compute / storage / tracking parts."""


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


class ModelRef(Ref):
    name_or_path: str
    """As configured (e.g. builtin:tiny, a hub id, an s3:// prefix)."""
    local_path: str
    """Resolved checkpoint directory (or hub id) on the machine that resolved it."""
    digest: str
    """Hash of the resolved checkpoint's config files (or the hub id and revision)."""


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
    steps: int = 0
    resumed_from: int | None = None
    """Step/generation of the checkpoint the last training attempt resumed from (None: it started fresh)."""
    work_by_node: dict[str, int] = {}
    """Ray node (short id) -> ESSA candidates scored there / GRPO worker starts there."""
    worker_failures: int = 0
    """Workers lost while training (ESSA re-dispatched their candidates; GRPO restarted from a checkpoint)."""


class EvalRef(Ref):
    uri: str
    label: str
    summary: dict[str, float]
    """greedy and pass@k."""
    num_problems: int
    samples_per_problem: int


class RegisteredRef(Ref):
    name: str
    version: str
    aliases: list[str]
    decision: str
    """Why the promotion gate moved (or did not move) the champion alias."""
    model_uri: str
    """models:/<name>/<version>."""


class PipelineResult(BaseModel):
    """What a finetune run reports at the end (the CLI prints it as its last JSON line)."""

    run_id: str
    before: dict[str, float]
    after: dict[str, float]
    model_name: str
    model_version: str
    aliases: list[str]
    decision: str
    tracking_uri: str
    storage_uri: str
    mlflow_run_id: str
    dataset_uri: str
    adapter_uri: str
    training: dict[str, Any] = {}
    """The training stage: method, steps, resumed_from, work_by_node (Ray node -> work), worker_failures."""
    stages: dict[str, float]
    """Wall seconds per stage as the orchestrator recorded them (0 for cache hits)."""
    cached: list[str]
    """Stages answered from the task cache."""
    flow_s: float
    """Flow wall time up to the final stage."""
    parts: dict[str, float]
    """Seconds inside stages spent on compute, storage and tracking; the rest of flow_s is orchestration."""


# ------------------------------------------------------------------------------------------------ timing


class Timer:
    """Splits a stage's wall time into named parts (compute, storage, tracking).

    Parts nest: storage written from inside a trainer's callback counts as storage, not as compute.
    """

    def __init__(self) -> None:
        self._start = time.perf_counter()
        self._parts: dict[str, float] = defaultdict(float)
        self._stack: list[str] = []

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        self._stack.append(name)
        try:
            yield
        finally:
            self._stack.pop()
            elapsed = time.perf_counter() - t0
            self._parts[name] += elapsed
            if self._stack:
                self._parts[self._stack[-1]] -= elapsed

    def timings(self) -> dict[str, float]:
        out = {k: round(v, 3) for k, v in self._parts.items()}
        out["total"] = round(time.perf_counter() - self._start, 3)
        return out


# ------------------------------------------------------------------------------------------------ helpers


def storage_uri_for(cfg: PipelineConfig) -> str:
    """cfg.storage_uri, except that the built-in default yields to ESSAFLOW_STORAGE_URI when that is set.

    (A UI form or a deployment sends every field, so "left at the default" is the only signal we get.)
    """
    default = PipelineConfig.model_fields["storage_uri"].default
    if cfg.storage_uri == default and os.environ.get("ESSAFLOW_STORAGE_URI"):
        return os.environ["ESSAFLOW_STORAGE_URI"]
    return cfg.storage_uri


def check_storage(uri: str, retry_timeout: float = 2.0) -> str:
    """Fail fast (StorageError naming endpoint, bucket or credentials) unless the store answers; absolute URI."""
    store = open_store(uri, retry_timeout=retry_timeout)
    store.exists("runs")
    return store.uri


def dataset_name(data: DataConfig) -> str:
    """A readable folder name for the source: synthetic-arith, gsm8k-main, problems (from problems.jsonl)."""
    if data.source == "synthetic":
        return "synthetic-arith"
    raw = (data.path or data.source).rstrip("/")
    base = raw.split("/")[-1].split("?")[0]
    base = base.split(".")[0] if data.source in ("file", "s3") else base
    if data.hf_config:
        base = f"{base}-{data.hf_config}"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.") or data.source


def manifest_digest(manifest: dict) -> str:
    """A directory artifact's content digest: the hash of its (path -> sha256, size) table."""
    return hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()[:16]


def config_hash(model: BaseModel) -> str:
    return hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:16]


def publish_dir(store: ArtifactStore, prefix: str, local_dir: Path, overwrite: bool = False) -> tuple[str, str]:
    """Upload a directory artifact (a no-op for identical content); returns (uri, digest)."""
    manifest = store.upload_dir(Path(local_dir), prefix, overwrite=overwrite)
    return store.url(prefix), manifest_digest(manifest)


def local_digest(local_dir: Path) -> str:
    """The digest `publish_dir` would report for this local directory."""
    files = {}
    for p in sorted(Path(local_dir).rglob("*")):
        if p.is_file():
            files[p.relative_to(local_dir).as_posix()] = {
                "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
                "size": p.stat().st_size,
            }
    return manifest_digest({"files": files})


def fetch_dir(uri: str, digest: str | None = None) -> Path:
    """A verified local copy of the directory artifact at `uri`, cached by digest (downloaded once per machine)."""
    store = open_store(uri)
    if digest is None:
        digest = manifest_digest(store.read_manifest(""))
    local = cache_root() / "artifacts" / digest
    if not local.is_dir():  # download_dir installs the directory only once every file checked out
        store.download_dir("", local)
    return local


# ------------------------------------------------------------------------------------------------ datasets


def _problems_table(problems: list[Problem]):
    import pyarrow as pa

    rows = [
        {"id": p.id, "prompt": p.prompt, "answer": p.answer, "metadata": json.dumps(p.metadata, sort_keys=True)}
        for p in problems
    ]
    schema = pa.schema(
        [("id", pa.string()), ("prompt", pa.string()), ("answer", pa.string()), ("metadata", pa.string())]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def publish_dataset(store: ArtifactStore, name: str, splits: Splits, data_cfg: DataConfig) -> DatasetRef:
    """Write the splits as Parquet under datasets/<name>/<content hash>/ unless that artifact is already there."""
    import pyarrow.parquet as pq

    fingerprint = splits.fingerprint()
    prefix = f"datasets/{name}/{fingerprint}"
    sizes = {s: len(getattr(splits, s)) for s in SPLITS}
    try:
        store.read_manifest(prefix)  # content-addressed: present means identical
    except StorageError as e:
        if e.kind != "incomplete":
            raise
        with tempfile.TemporaryDirectory(prefix="essaflow-dataset-") as tmp:
            for split in SPLITS:
                pq.write_table(_problems_table(getattr(splits, split)), Path(tmp) / f"{split}.parquet")
            info = {"name": name, "hash": fingerprint, "sizes": sizes, "config": data_cfg.model_dump(mode="json")}
            (Path(tmp) / "info.json").write_text(json.dumps(info, indent=2, sort_keys=True))
            store.upload_dir(Path(tmp), prefix)
    return DatasetRef(
        uri=store.url(prefix), name=name, hash=fingerprint, config_hash=config_hash(data_cfg), sizes=sizes
    )


def read_dataset(ref: DatasetRef) -> Splits:
    """Download (once per machine, verified) and parse the dataset's splits."""
    import pyarrow.parquet as pq

    local = fetch_dir(ref.uri)

    def problems(split: str) -> list[Problem]:
        rows = pq.read_table(local / f"{split}.parquet").to_pylist()
        return [Problem(**{**r, "metadata": json.loads(r["metadata"] or "{}")}) for r in rows]

    splits = Splits(sft=problems("sft"), train=problems("train"), eval=problems("eval"))
    if splits.fingerprint() != ref.hash:
        raise StorageError(f"dataset at {ref.uri} does not match its content hash {ref.hash}", "integrity")
    return splits


# ------------------------------------------------------------------------------------------------ checkpoints


def checkpoint_prefix(run: RunRef) -> str:
    return f"{run.run_prefix}/checkpoints"


def latest_checkpoint(store: ArtifactStore, run: RunRef) -> str | None:
    """Name of the newest committed checkpoint (manifest present) of this run, or None."""
    root = checkpoint_prefix(run)
    rel = [k[len(root) + 1 :].split("/") for k in store.list(root)]
    committed = {parts[0] for parts in rel if len(parts) == 2 and parts[1] == MANIFEST}
    if not committed:
        return None
    return max(committed, key=lambda c: (int(c) if c.isdigit() else -1, c))


def restore_checkpoint(store: ArtifactStore, run: RunRef, local_root: Path) -> str | None:
    """Download the newest committed checkpoint into local_root/<step>/ (verified); returns its name."""
    name = latest_checkpoint(store, run)
    if name is not None:
        with tempfile.TemporaryDirectory(dir=_mkdir(local_root), prefix=".restore-") as tmp:
            store.download_dir(f"{checkpoint_prefix(run)}/{name}", Path(tmp) / "ckpt")
            os.replace(Path(tmp) / "ckpt" / CHECKPOINT_DATA, Path(local_root) / name)
    return name


def sync_checkpoint(store: ArtifactStore, run: RunRef, local_ckpt: Path) -> str:
    """Upload one checkpoint directory written by a trainer; returns its URI.

    The trainer's files go under `data/` (a trainer may keep its own manifest.json at its top level), hard-linked
    into a staging directory rather than copied.
    """
    local_ckpt = Path(local_ckpt)
    prefix = f"{checkpoint_prefix(run)}/{local_ckpt.name}"
    with tempfile.TemporaryDirectory(dir=local_ckpt.parent, prefix=".sync-") as tmp:
        shutil.copytree(local_ckpt, Path(tmp) / CHECKPOINT_DATA, copy_function=_link_or_copy)
        store.upload_dir(Path(tmp), prefix, overwrite=True)  # a retried attempt may rewrite a step
    return store.url(prefix)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _mkdir(path: Path) -> Path:
    Path(path).mkdir(parents=True, exist_ok=True)
    return Path(path)


# ------------------------------------------------------------------------------------------------ eval reports


def publish_eval(store: ArtifactStore, run: RunRef, label: str, report: EvalReport, protocol: dict) -> EvalRef:
    """Write runs/<run_id>/eval/<label>/{passk.json, samples.jsonl.gz, passk.png} as one directory artifact."""
    prefix = f"{run.run_prefix}/eval/{label}"
    with tempfile.TemporaryDirectory(prefix="essaflow-eval-") as tmp:
        d = Path(tmp)
        body = {"label": label, **json.loads(report.to_json()), "protocol": protocol}
        body.pop("correct_counts"), body.pop("problem_ids")
        (d / "passk.json").write_text(json.dumps(body, indent=2, sort_keys=True))
        lines = [
            json.dumps({"id": pid, "n": report.samples_per_problem, "correct": c})
            for pid, c in zip(report.problem_ids, report.correct_counts)
        ]
        with open(d / "samples.jsonl.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(("\n".join(lines) + "\n").encode())
        plot_pass_at_k({label: report}, d / "passk.png")
        store.upload_dir(d, prefix, overwrite=True)  # a retried evaluation replaces its own report
    return EvalRef(
        uri=store.url(prefix),
        label=label,
        summary=report.summary(),
        num_problems=report.num_problems,
        samples_per_problem=report.samples_per_problem,
    )


def read_eval_report(ref: EvalRef) -> EvalReport:
    """Rebuild an EvalReport (with per-problem counts) from its stored files."""
    local = fetch_dir(ref.uri)
    body = json.loads((local / "passk.json").read_text())
    with gzip.open(local / "samples.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return EvalReport(
        num_problems=body["num_problems"],
        samples_per_problem=body["samples_per_problem"],
        greedy=body["greedy"],
        pass_at_k=body["pass_at_k"],
        correct_counts=[r["correct"] for r in rows],
        problem_ids=[r["id"] for r in rows],
        wall_s=body.get("wall_s", 0.0),
        sequences_per_s=body.get("sequences_per_s", 0.0),
    )
