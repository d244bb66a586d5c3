"""Read problems from a source named by DataConfig: synthetic, local files, Hugging Face datasets, or s3://."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from essaflow.data.config import DataConfig
from essaflow.data.errors import DataFileError
from essaflow.data.readers import Table, rows_table
from essaflow.data.rows import table_problems
from essaflow.data.schema import Problem
from essaflow.data.shards import Snapshot, local_snapshot, read_snapshot, s3_snapshot
from essaflow.data.synthetic_tasks import task_problems

log = logging.getLogger(__name__)
#: sources an installed package generates or ships (essaflow.data.reasoning_gym, essaflow.data.humaneval)
PACKAGE_SOURCES = ("reasoning_gym", "humaneval")


@dataclass(frozen=True)
class LoadedProblems:
    """What a source yielded: the problems, and the malformed rows dropped under data.on_bad_row=drop."""

    problems: list[Problem]
    dropped: list[tuple[int, str]]
    source: str
    snapshot: Snapshot
    """The files read and their versions (the run's dataset input)."""


def _read_hf(cfg: DataConfig) -> Table:
    import datasets

    assert cfg.path
    local = Path(cfg.path)
    try:
        if local.is_dir() and (local / "dataset_info.json").exists():
            # A dataset saved with save_to_disk (one split).
            ds = datasets.load_from_disk(str(local))
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[cfg.hf_split]
        else:
            ds = datasets.load_dataset(cfg.path, cfg.hf_config, split=cfg.hf_split, revision=cfg.hf_revision)
    except (KeyError, ValueError, FileNotFoundError) as e:  # unknown split or config, no data files
        # a local file or folder of data files is data.source=file's (the hub loader says only "no data file")
        hint = "; a local file or folder of data files: set data.source=file" if local.exists() else ""
        raise DataFileError(f"{cfg.path}: cannot load split {cfg.hf_split!r}: {type(e).__name__}: {e}{hint}") from None
    return rows_table(cfg.path, ds.column_names, ds)


def source_snapshot(cfg: DataConfig) -> Snapshot:
    """The files a file or s3 source names now, with their versions (nothing read); other sources: their digest."""
    from essaflow.data.fingerprint import source_fingerprint

    if cfg.source == "file":
        return local_snapshot(cfg.path or "")
    if cfg.source == "s3":
        return s3_snapshot(cfg.path or "")
    return Snapshot(cfg.path or cfg.source, {}, source_fingerprint(cfg))


def read_source(cfg: DataConfig, snapshot: Snapshot | None = None) -> Table:
    """The raw records of a file, HF or s3 source (not synthetic): of ``snapshot``'s files when given."""
    if not cfg.path:
        raise DataFileError(f"data.path is required for data.source={cfg.source!r}")
    if cfg.source == "hf":
        return _read_hf(cfg)
    return read_snapshot(snapshot or source_snapshot(cfg))


def read_problems(cfg: DataConfig) -> LoadedProblems:
    """Problems and the dropped rows; malformed rows raise one BadRowsError unless on_bad_row=drop."""
    snapshot = source_snapshot(cfg)
    dropped: list[tuple[int, str]] = []
    if cfg.source == "synthetic":
        s = cfg.synthetic
        try:
            problems = task_problems(s.task, s.num_problems, cfg.seed, s.knobs())
        except ValueError as e:  # knobs with fewer distinct problems than num_problems asks for
            raise DataFileError(f"data.synthetic: {e}: lower data.synthetic.num_problems, or give the "
                                f"{s.task} task's knobs more room") from None  # fmt: skip
    elif cfg.source == "reasoning_gym":
        from essaflow.data.reasoning_gym import reasoning_gym_problems

        problems = reasoning_gym_problems(cfg.reasoning_gym, cfg.seed)
    elif cfg.source == "humaneval":
        from essaflow.data.humaneval import humaneval_problems

        problems = humaneval_problems()
    else:
        problems, dropped = table_problems(read_source(cfg, snapshot), cfg)
    if cfg.max_problems is not None:
        problems = problems[: cfg.max_problems]
    if cfg.source in PACKAGE_SOURCES and cfg.prompt_template != "{prompt}":  # files apply it row by row
        template = cfg.prompt_template
        problems = [p.model_copy(update={"prompt": template.replace("{prompt}", p.prompt)}) for p in problems]
    return LoadedProblems(problems, dropped, cfg.path or cfg.source, snapshot)


def load_problems(cfg: DataConfig) -> list[Problem]:
    """Load and validate problems; malformed rows raise (default) or are dropped and logged with a count."""
    loaded = read_problems(cfg)
    if loaded.dropped:
        shown = "; ".join(why for _, why in loaded.dropped[:10])
        log.warning("dropped %d malformed row(s) from %s: %s", len(loaded.dropped), loaded.source, shown)
    return loaded.problems
