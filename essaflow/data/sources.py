"""Read problems from a source named by DataConfig: synthetic, local file, Hugging Face datasets, or s3://."""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from essaflow.data.config import DataConfig
from essaflow.data.schema import Problem, normalise_rows
from essaflow.data.synthetic import synthetic_problems
from essaflow.rewards import after_hashes, last_boxed

log = logging.getLogger(__name__)

_ADAPTER_COLUMNS = {
    # GSM8K: question / answer (worked solution ending in '#### 42')
    "gsm8k": {"prompt": "question", "answer": "answer"},
    # MATH / MATH500: problem / solution (final answer in the last \boxed{})
    "math": {"prompt": "problem", "answer": "solution"},
    "plain": {},
}


def _read_file(path: Path) -> list[dict[str, Any]]:
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        frame = pd.read_json(path, lines=True, dtype=False)
    elif suffix == ".json":
        frame = pd.read_json(path, dtype=False)
    elif suffix == ".csv":
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    elif suffix == ".parquet":
        frame = pd.read_parquet(path)
    else:
        raise ValueError(f"unsupported data file type {suffix!r} for {path}; use .jsonl, .json, .csv or .parquet")
    return frame.to_dict(orient="records")


def _read_hf(cfg: DataConfig) -> list[dict[str, Any]]:
    import datasets

    assert cfg.path
    local = Path(cfg.path)
    if local.is_dir() and (local / "dataset_info.json").exists():
        # A dataset saved with save_to_disk (one split).
        ds = datasets.load_from_disk(str(local))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[cfg.hf_split]
    else:
        ds = datasets.load_dataset(cfg.path, cfg.hf_config, split=cfg.hf_split, revision=cfg.hf_revision)
    return [dict(r) for r in ds]


def _read_s3(cfg: DataConfig) -> list[dict[str, Any]]:
    from essaflow.storage import open_store

    assert cfg.path
    with tempfile.TemporaryDirectory() as tmp:
        name = cfg.path.rstrip("/").rsplit("/", 1)[-1]
        local = Path(tmp) / name
        open_store(cfg.path.rsplit("/", 1)[0]).download_file(name, local)
        return _read_file(local)


def _map_columns(rows: list[dict[str, Any]], cfg: DataConfig) -> list[dict[str, Any]]:
    mapping = {**_ADAPTER_COLUMNS[cfg.adapter], **cfg.columns}
    out = []
    for row in rows:
        mapped = {ours: row.get(theirs) for ours, theirs in mapping.items()}
        for key in ("id", "prompt", "answer", "solution"):
            if key not in mapped and key in row:
                mapped[key] = row[key]
        answer = mapped.get("answer")
        if isinstance(answer, float) and answer != answer:  # NaN from pandas means missing
            answer = None
        if isinstance(answer, str) and cfg.adapter in ("gsm8k", "math"):
            mapped.setdefault("solution", answer)  # the worked solution, for sft.target=solution
            answer = after_hashes(answer) if cfg.adapter == "gsm8k" else last_boxed(answer)
        elif answer is not None and not isinstance(answer, str):
            answer = str(answer)
        mapped["answer"] = answer
        if isinstance(mapped.get("prompt"), str):
            mapped["prompt"] = cfg.prompt_template.replace("{prompt}", mapped["prompt"])
        out.append(mapped)
    return out


def load_problems(cfg: DataConfig) -> list[Problem]:
    """Load and validate problems; malformed rows raise (default) or are dropped and logged with a count."""
    if cfg.source == "synthetic":
        s = cfg.synthetic
        problems = synthetic_problems(s.num_problems, s.min_digits, s.max_digits, s.operators, cfg.seed)
    else:
        if not cfg.path:
            raise ValueError(f"data.path is required for data.source={cfg.source!r}")
        if cfg.source == "file":
            path = Path(cfg.path)
            if not path.exists():
                raise FileNotFoundError(f"data.path does not exist: {path}")
            rows = _read_file(path)
        elif cfg.source == "hf":
            rows = _read_hf(cfg)
        else:
            rows = _read_s3(cfg)
        problems, dropped = normalise_rows(_map_columns(rows, cfg), cfg.path, cfg.on_bad_row)
        if dropped:
            log.warning("dropped %d malformed row(s) from %s: %s", len(dropped), cfg.path, dropped[:10])
    if cfg.max_problems is not None:
        problems = problems[: cfg.max_problems]
    return problems
