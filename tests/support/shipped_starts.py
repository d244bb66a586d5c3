"""The fixed SFT starts of the learning tests, shipped as bytes in tests/learning/starts/<preset>/.

SFT's float sums differ between CPU models, and at a test's budget a method's held-out gain depends on the start it
trains from: ESSA on arithmetic gained from -5 to +13 problems of 256 over the starts measured
(docs/algorithms.md sec. 6.17), and one start trained on another CI machine lost 2 to 5 problems on all three
seeds. A start trained on the test machine would make the outcome depend on the machine, so each learning test
trains from its preset's own SFT start as trained on an AMD EPYC. It is read with safetensors, like any adapter.

    .venv/bin/python -m tests.support.shipped_starts tiny-essa.yaml [...]   # retrain and rewrite shipped copies

Each start records the SFT key of the model, SFT config, split and prompt format it was trained for; when the
preset's differ (a changed tiny model, task or SFT setting), the test stops and says to rebuild it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from essaflow.config import PipelineConfig
from essaflow.data import Splits
from essaflow.model.loading import resolve_model_path
from essaflow.training.warm_start import cached_sft_adapter, sft_key

STARTS = Path(__file__).resolve().parents[1] / "learning" / "starts"
RECORD = "start.json"
FILES = ("adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json")


def key_of(cfg: PipelineConfig, splits: Splits) -> str:
    return sft_key(cfg.model, cfg.sft, splits.sft, cfg.data.prompt_format())


def shipped_start(preset: str, cfg: PipelineConfig, splits: Splits, out: Path) -> Path:
    """A copy of the preset's shipped start in out/start, after checking it was trained for this config; the copy
    names this machine's path to the base, as one trained here."""
    shipped = STARTS / Path(preset).stem
    recorded = json.loads((shipped / RECORD).read_text())["sft_key"]
    if recorded != key_of(cfg, splits):
        raise AssertionError(
            f"{shipped} was trained for SFT key {recorded}, not {preset}'s {key_of(cfg, splits)} (its model, "
            f"task or SFT settings changed): rebuild it with `.venv/bin/python -m tests.support.shipped_starts "
            f"{preset}`"
        )
    start = out / "start"
    shutil.copytree(shipped, start, ignore=shutil.ignore_patterns(RECORD))
    adapter = json.loads((start / "adapter_config.json").read_text())
    adapter["base_model_name_or_path"] = resolve_model_path(cfg.model.name_or_path)
    (start / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n")
    return start


def rebuild(preset: str, cfg: PipelineConfig, splits: Splits, cpu: str) -> Path:
    """Train (or take from the cache) the preset's SFT start and copy it into its shipped folder."""
    trained = cached_sft_adapter(cfg.model, cfg.sft, splits, cfg.data.prompt_format())
    shipped = STARTS / Path(preset).stem
    shipped.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copyfile(trained / name, shipped / name)
    adapter = json.loads((trained / "adapter_config.json").read_text())
    adapter["base_model_name_or_path"] = cfg.model.name_or_path  # not this machine's path to it
    (shipped / "adapter_config.json").write_text(json.dumps(adapter, indent=2) + "\n")
    record = {"sft_key": key_of(cfg, splits), "model": cfg.model.name_or_path, "sft": cfg.sft.model_dump(), "cpu": cpu}
    (shipped / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return shipped


if __name__ == "__main__":
    import sys

    import torch

    from essaflow.config import load_config
    from essaflow.data.prepare import prepare_splits

    torch.set_num_threads(1)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")  # fmt: skip
    for name in sys.argv[1:]:
        cfg = load_config(Path(__file__).resolve().parents[2] / "configs" / name, [])
        print(rebuild(name, cfg, prepare_splits(cfg.data), cpu))
