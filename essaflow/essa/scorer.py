"""One ESSA candidate scorer: base + SFT adapter + frozen SVD bases, loaded once; fitness per candidate by inference.

What a scorer computes is in three places (docs/algorithms.md sec. 2.7, 6): the fitness kinds (`fitness.py`), the
engine that turns offsets into that fitness (`population_scoring.py`: transformers, a run of candidates in shared
row batches; `engine.py`: transformers one candidate at a time, merged or on the LoRA path, or one vLLM
batch), and, in seed mode, the strategy replica that draws the candidates on the worker (`replica.py`). This
module loads what they share and answers the driver's calls: `ready` (load the spec, once), `score` (one candidate),
`score_range` (a run of them) and `score_share` (a seed-mode share).

A Ray actor is built without arguments and loads with its first `ready(spec)` call (the driver sends the spec with
every `ready`): Ray re-runs an actor's constructor when it restarts one, and a constructor argument held in the
object store may be gone by then (ray-project/ray#53727; Ray warns about every such actor). In this process,
`CandidateScorer(spec)` loads at once.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

from essaflow import cluster
from essaflow.essa.engine import TransformersScoring, VLLMScoring, vllm_scoring
from essaflow.essa.fitness import MinibatchFitness
from essaflow.essa.population_scoring import PopulationScoring
from essaflow.essa.replica import ReplicaScorer, ReplicaState, Reply
from essaflow.essa.scoring_spec import ScoringSpec
from essaflow.generation.prompt_format import PromptFormat
from essaflow.model.config import ModelConfig
from essaflow.usage import Usage, device_time

log = logging.getLogger(__name__)


def unpacked_adapter(spec: ScoringSpec) -> tuple[str, tempfile.TemporaryDirectory | None]:
    """The SFT adapter's directory on this machine: the driver's, or a private copy written from the shipped files
    (kept while the returned TemporaryDirectory lives)."""
    if Path(spec.adapter_dir).is_dir():
        return spec.adapter_dir, None
    if not spec.adapter_files:  # another machine than the driver's, and nothing shipped
        raise FileNotFoundError(cluster.unshared_path_message("ESSA worker", "SFT adapter", spec.adapter_dir))
    copy = tempfile.TemporaryDirectory(prefix="essaflow-adapter-")  # removed with the worker
    for name, data in spec.adapter_files.items():
        target = Path(copy.name) / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return copy.name, copy


class NotLoaded(RuntimeError):
    """Work sent to a scorer that has not loaded its spec: a Ray actor restarted since its last `ready(spec)`."""


class CandidateScorer:
    """Base + SFT adapter + SVD bases, loaded once; `score` applies offsets and measures minibatch reward."""

    def __init__(self, spec: ScoringSpec | None = None):
        """Loads `spec` now when given (in this process); a Ray actor is built empty and loads in `ready(spec)`."""
        self.spec: ScoringSpec | None = None
        if spec is not None:
            self.load(spec)

    def load(self, spec: ScoringSpec) -> None:
        """The base model, the SFT adapter, the SVD bases and the scoring engine of `spec`."""
        from essaflow.essa.svd_lora import SVDLoRA
        from essaflow.generation.sampling import TransformersGenerator
        from essaflow.model.loading import load_model_with_adapter

        adapter_dir, self._adapter_copy = unpacked_adapter(spec)
        # on model.device: auto puts a worker with a GPU share on it, one without (CUDA hidden by Ray) on CPU
        model_cfg = ModelConfig(**spec.model)
        model, tok = load_model_with_adapter(model_cfg, adapter_dir)  # base quantised per model.quantization
        merged = spec.merged and model_cfg.quantization == "none"
        if spec.merged and not merged:  # docs/algorithms.md sec. 6.15
            log.info("model.quantization=%s: scoring on the LoRA path (an int8/int4 base weight cannot hold "
                     "W0 + scaling B'A'; essa.merged_scoring ignored)", model_cfg.quantization)  # fmt: skip
        self.on_gpu = next(model.parameters()).device.type == "cuda"  # device_s: GPU wall time, else CPU time
        self.svd = SVDLoRA(model, spec.alpha, nonnegative=spec.nonnegative, offsets=spec.offsets)
        self.generator = TransformersGenerator(model, tok, spec.batch_size, PromptFormat(**spec.prompt_format))
        self.fitness = MinibatchFitness(spec, self.generator, spec.judge.build())
        self.scoring: TransformersScoring | VLLMScoring | PopulationScoring
        if spec.backend == "vllm" and spec.fitness == "accuracy":
            self.scoring = vllm_scoring(spec, model_cfg, self.svd, self.fitness)
        elif spec.batched:  # candidates share batches, each row with its own singular values
            self.scoring = PopulationScoring(spec, self.svd, self.fitness)
        else:
            self.scoring = TransformersScoring(self.svd, self.fitness, merged)
        self.replica = ReplicaScorer(spec.search, self.svd.dimension, len(spec.prompts))
        self.spec = spec  # last: a load that failed part way leaves the scorer unloaded

    @property
    def batched(self) -> bool:
        """Whether a run of candidates is scored together (vLLM's one engine batch, or shared row batches on
        transformers with essa.batched_scoring) rather than one by one."""
        return self.scoring.batched

    def ready(self, spec: ScoringSpec | None = None) -> tuple[int, str]:
        """The search dimension (the driver checks it matches its own) and the Ray node this scorer runs on; loads
        `spec` first when nothing is loaded yet (a new or restarted actor)."""
        if self.spec is None:
            if spec is None:
                raise NotLoaded("ready() on a scorer with nothing loaded: pass the ScoringSpec")
            self.load(spec)
        return self.svd.dimension, cluster.node_id()

    def _loaded(self) -> None:
        if self.spec is None:
            raise NotLoaded("a scorer restarted by Ray is sent work before its ready(spec) call")

    def score(self, index: int, offsets: np.ndarray, prompt_idx: np.ndarray, seed: int) -> tuple[int, float, bytes]:
        """Fitness of one candidate on the minibatch (all b prompts in one batched call), rounded to float32 (what
        travels in seed mode, so every transport tells the strategy the same numbers), and what it cost."""
        self._loaded()
        usage = Usage()
        with device_time(usage, self.on_gpu):
            value = self.scoring([offsets], prompt_idx, seed, usage)[0]
        return index, value, usage.encode()

    def score_range(self, xs: np.ndarray, start: int, prompt_idx: np.ndarray, seed: int) -> tuple[list[float], Usage]:
        """Fitness of a run of candidates: together when `batched` (one cost record), else candidate by
        candidate."""
        self._loaded()
        usage = Usage()
        if self.batched:
            with device_time(usage, self.on_gpu):
                return self.scoring(list(xs), prompt_idx, seed, usage), usage
        values = []
        for i, x in enumerate(xs):
            _, value, cost = self.score(start + i, x, prompt_idx, seed)
            values.append(value)
            usage.add(Usage.decode(cost))
        return values, usage

    def score_share(
        self, generation: int, start: int, stop: int, others: bytes | None = None, state: ReplicaState | None = None
    ) -> Reply:
        """Seed mode: candidates start..stop-1 of `generation`, drawn by this worker's replica, and their fitness
        (`ReplicaScorer.score_share`)."""
        self._loaded()
        return self.replica.score_share(generation, start, stop, others, state, self.score_range)
