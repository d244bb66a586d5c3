"""Which prefixes of an artifact store go and which stay, and why (docs/retention.md).

The store's layout (essaflow/artifacts/__init__.py) has three kinds of things gc may delete:

- `runs/<run_id>/`: the newest `keep_runs` runs of each pipeline stay whole. An older run that a registered version
  references keeps its lineage (record, eval reports, adapter, metrics) and loses its checkpoints (training state,
  only for resuming a run that is over); an older run no version references goes whole, if the registry's
  tracking server knows it (else it may be registered elsewhere: it is kept as a registered one is).
- `datasets/<name>/<hash>/`: a cache; it stays while a registered version references it or a kept run's data
  config produced it (its info.json), else it goes (a later run with that config publishes it again).
- `adapters/sft/<key>/`: a cache; it stays while a registered version references it or a kept run's SFT start
  has that key, else it goes (a later run trains it again).

Everything else (MLflow's artifacts under the same bucket, given adapters, anything unknown) is never touched.
Fail closed: a run whose record cannot be read, a dataset whose info.json cannot be read and, when any kept run's
SFT key cannot be worked out, every SFT adapter, are kept and listed with the reason.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from pydantic import BaseModel

from essaflow.retention.references import VersionRefs
from essaflow.storage import MANIFEST, ArtifactStore

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"


class PrefixEntry(BaseModel):
    """One prefix of the store, what it holds and why it goes or stays."""

    prefix: str
    bytes: int
    objects: int
    why: str


class GCPlan(BaseModel):
    """What a gc of one store deletes (`delete`) and keeps (`keep`)."""

    storage_uri: str
    keep_runs: int
    delete: list[PrefixEntry] = []
    keep: list[PrefixEntry] = []

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.delete)


class _Run(BaseModel):
    run_id: str
    name: str
    created: str
    config: dict


def plan_gc(
    store: ArtifactStore, versions: Iterable[VersionRefs], keep_runs: int, is_tracked: Callable[[str], bool]
) -> GCPlan:
    """The plan for `store` given the registry's references (read those first: see references.py) and whether the
    registry's tracking server knows a run (`is_tracked(run_id)`; references.tracked_runs)."""
    planner = _Planner(store, list(versions), keep_runs, is_tracked)
    kept_runs = planner.runs()
    planner.datasets(kept_runs)
    planner.sft_adapters(kept_runs)
    return planner.plan


class _Planner:
    def __init__(
        self, store: ArtifactStore, versions: list[VersionRefs], keep_runs: int, is_tracked: Callable[[str], bool]
    ):
        self.store, self.keep_runs, self.is_tracked = store, keep_runs, is_tracked
        self.sizes = store.sizes("")
        self.registered = {v.run_id: v.version for v in versions if v.run_id}
        self.referenced = _referenced_keys(store, versions)
        self.plan = GCPlan(storage_uri=store.uri, keep_runs=keep_runs)

    def add(self, to: list[PrefixEntry], prefix: str, why: str, but: str = "") -> None:
        """An entry for what `prefix` holds (less what lies under `but`)."""
        inside = [n for k, n in self.sizes.items() if k.startswith(prefix + "/") and not (but and k.startswith(but))]
        if inside:
            to.append(PrefixEntry(prefix=prefix, bytes=sum(inside), objects=len(inside), why=why))

    def reference_in(self, prefix: str) -> str | None:
        """A referenced key that is `prefix`, lies under it or holds it."""
        hits = (r for r in self.referenced if r == prefix or r.startswith(prefix + "/") or prefix.startswith(r + "/"))
        return next(hits, None)

    def runs(self) -> list[_Run]:
        """Plan runs/: the runs kept (whole or for a registered version) are returned."""
        runs, unreadable = _read_runs(self.store, _children(self.sizes, "runs"))
        for run_id, why in unreadable.items():
            self.add(self.plan.keep, f"runs/{run_id}", why)
        by_name: dict[str, list[_Run]] = defaultdict(list)
        for run in runs:
            by_name[run.name].append(run)
        kept: list[_Run] = []
        for name, group in sorted(by_name.items()):
            group.sort(key=lambda r: r.created, reverse=True)
            for run in group[: self.keep_runs]:
                self.add(self.plan.keep, f"runs/{run.run_id}", f"one of the last {self.keep_runs} runs of {name}")
            kept += group[: self.keep_runs]
            kept += [run for run in group[self.keep_runs :] if self.older_run(run)]
        return kept

    def older_run(self, run: _Run) -> bool:
        """Plan a run older than the last N of its pipeline; True if a registered version keeps part of it."""
        prefix, older = f"runs/{run.run_id}", f"older than the last {self.keep_runs}"
        version = self.registered.get(run.run_id)
        if version is None and self.reference_in(prefix) is None:
            if self.is_tracked(run.run_id):
                self.add(self.plan.delete, prefix, f"run of {run.name} {older}, no registered version")
                return False
            needs = "not tracked by this registry's server, so whether a version needs it is unknown: kept"
        else:
            needs = f"{version or 'a registered version'} needs it"
        checkpoints = f"{prefix}/{CHECKPOINTS}"
        if self.reference_in(checkpoints):
            self.add(self.plan.keep, prefix, needs)
        else:
            self.add(self.plan.keep, prefix, f"{needs} (its checkpoints go)", but=checkpoints + "/")
            self.add(self.plan.delete, checkpoints, f"checkpoints of a finished run of {run.name} {older}")
        return True

    def datasets(self, kept_runs: list[_Run]) -> None:
        in_use = {_canonical(r.config.get("data")) for r in kept_runs}
        for prefix in _children(self.sizes, "datasets", depth=2):
            if self.reference_in(prefix):
                self.add(self.plan.keep, prefix, "a registered version uses it")
                continue
            try:
                produced_by = _canonical(self.store.get_json(f"{prefix}/info.json")["config"])
            except Exception as e:  # noqa: BLE001 - fail closed: what cannot be read is kept
                self.add(self.plan.keep, prefix, f"info.json unreadable ({type(e).__name__}): kept")
                continue
            if produced_by in in_use:
                self.add(self.plan.keep, prefix, "a kept run's data config produced it")
            else:
                self.add(self.plan.delete, prefix, "dataset cache no kept run or registered version uses")

    def sft_adapters(self, kept_runs: list[_Run]) -> None:
        keys, unknown = _sft_keys(self.store, kept_runs, self.sizes)
        for prefix in _children(self.sizes, "adapters/sft"):
            if self.reference_in(prefix):
                self.add(self.plan.keep, prefix, "a registered version uses it")
            elif unknown:
                self.add(self.plan.keep, prefix, f"kept: {unknown}")
            elif prefix.rsplit("/", 1)[1] in keys:
                self.add(self.plan.keep, prefix, "a kept run's SFT start")
            else:
                self.add(self.plan.delete, prefix, "SFT adapter cache no kept run or registered version uses")


def _children(sizes: dict[str, int], root: str, depth: int = 1) -> list[str]:
    """The prefixes `depth` levels under `root` that hold objects (datasets/<name>/<hash>: depth 2)."""
    n = root.count("/") + 1 + depth
    return sorted({"/".join(k.split("/")[:n]) for k in sizes if k.startswith(root + "/") and k.count("/") >= n})


def _referenced_keys(store: ArtifactStore, versions: list[VersionRefs]) -> set[str]:
    """The registry's URIs that point into this store, as keys relative to its root."""
    root = store.uri.rstrip("/") + "/"
    return {u.removeprefix(root).strip("/") for v in versions for u in v.uris if u.startswith(root)}


def _read_runs(store: ArtifactStore, prefixes: list[str]) -> tuple[list[_Run], dict[str, str]]:
    """Each run's record (name, config, when it opened); {run_id: why} for those whose record cannot be read."""
    runs, unreadable = [], {}
    for prefix in prefixes:
        run_id = prefix.split("/")[1]
        try:
            created = store.read_manifest(f"{prefix}/record")["created"]
            body = store.get_json(f"{prefix}/record/run.json")
            runs.append(_Run(run_id=run_id, name=body["name"], created=created, config=body["config"]))
        except Exception as e:  # noqa: BLE001 - fail closed: a run gc cannot place is kept
            unreadable[run_id] = f"record unreadable ({type(e).__name__}): kept"
    return runs, unreadable


def _canonical(tree: object) -> str:
    import json

    return json.dumps(tree, sort_keys=True)


def _sft_keys(store: ArtifactStore, runs: list[_Run], sizes: dict[str, int]) -> tuple[set[str], str]:
    """The SFT adapter keys the kept runs start from, and why they cannot all be worked out ('' when they can)."""
    from essaflow.artifacts.datasets import read_dataset
    from essaflow.config import parse_config
    from essaflow.refs import DatasetRef
    from essaflow.training.warm_start import sft_key

    datasets = {}
    for prefix in _children(sizes, "datasets", depth=2):
        if f"{prefix}/{MANIFEST}" in sizes:
            try:
                datasets[_canonical(store.get_json(f"{prefix}/info.json")["config"])] = prefix
            except Exception:  # noqa: BLE001 - a kept run that needs it is then unknown (below)
                continue
    keys: set[str] = set()
    for run in runs:
        try:
            cfg = parse_config(run.config)
            if cfg.adapter_uri:
                continue
            prefix = datasets[_canonical(run.config.get("data"))]
            _, name, fingerprint = prefix.split("/")
            ref = DatasetRef(uri=store.url(prefix), name=name, hash=fingerprint, config_hash="", sizes={})
            keys.add(sft_key(cfg.model, cfg.sft, read_dataset(ref).sft, cfg.data.prompt_format()))
        except Exception as e:  # noqa: BLE001 - fail closed: keep every SFT adapter
            log.info("SFT start of run %s unknown: %s", run.run_id, e)
            return keys, f"the SFT start of run {run.run_id} cannot be worked out ({type(e).__name__})"
    return keys, ""
