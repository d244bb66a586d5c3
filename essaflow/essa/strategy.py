"""Ask/tell search strategies over the SVD-LoRA offsets, checkpointable without pickle.

- `cma`     full-covariance CMA-ES (Hansen & Ostermeier 2001) through the `cmaes` library, the optimiser of ESSA
            (ESSA-v3 sec. 3.2; docs/algorithms.md sec. 2.4): standard (mu/mu_w, lambda) defaults, comma selection,
            no bounds, initial mean = zero offset (the SFT point), sigma0 from the config
            (docs/algorithms.md sec. 6.2-6.3).
- `sep_cma` separable (diagonal) CMA-ES, a labelled deviation for large d where a d x d covariance is too heavy
            (docs/algorithms.md sec. 2.5 notes that at ESSA's dimensions C barely adapts, so the two behave alike).
- `es`      the peer baseline: plain Gaussian ES (Qiu et al. 2025; docs/algorithms.md sec. 2.6) with z-scored fitness,
            m <- m + (lr / N) sum_n Z_n eps_n (1/sigma folded into lr), with antithetic pairs (m +- sigma eps)
            by default, or Qiu's original i.i.d. samples (`essa.es_antithetic: false`).

Every strategy maximises the reward; `cmaes` minimises, so CMA is told the negated fitness (docs/algorithms.md sec. 2.4
"cma.tell(X, -F)"). State is plain numpy arrays and scalars: `state_dict()` returns (JSON-able dict, arrays) and
`load_state_dict` restores it bit for bit, RNG included, so a resumed run replays the uninterrupted one exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np
from cmaes import CMA, SepCMA
from threadpoolctl import threadpool_limits

from essaflow.essa.config import ESSAConfig

Arrays = dict[str, np.ndarray]


def one_blas_thread():
    """ask and tell run their linear algebra on one BLAS thread in every process. A multi-threaded BLAS sums in an
    order that depends on its thread count, and Ray starts actors with one thread, so a seed-synchronised worker's
    CMA-ES replica (its eigendecomposition, B D z) drifted from the driver's in the last bits and was resynced every
    generation: 1.6 MB a generation on the tiny task instead of 87 bytes (docs/algorithms.md sec. 2.8). The work is
    small (d x d at d <= a few thousand), so one thread costs nothing that matters."""
    return threadpool_limits(limits=1, user_api="blas")


def dump_attrs(obj: object, prefix: str) -> tuple[dict[str, Any], Arrays]:
    """Every attribute of obj as JSON (scalars, None, RandomState bookkeeping) + arrays keyed by prefix.

    Used on `cmaes` optimisers, whose whole state is numpy arrays, numpy/Python scalars and one RandomState;
    anything else raises, so a future `cmaes` that adds an exotic attribute fails loudly instead of resuming wrong.
    Python floats survive JSON exactly (repr round-trips), numpy scalars keep their dtype.
    """
    meta: dict[str, Any] = {}
    arrays: Arrays = {}
    for name, value in vars(obj).items():
        key = f"{prefix}{name}"
        if isinstance(value, np.random.RandomState):
            kind, keys, pos, has_gauss, cached = value.get_state(legacy=True)
            arrays[key] = keys
            meta[name] = {"t": "rng", "kind": kind, "pos": int(pos), "has_gauss": int(has_gauss), "g": float(cached)}
        elif isinstance(value, np.ndarray):
            arrays[key] = value
            meta[name] = {"t": "array"}
        elif isinstance(value, np.generic):
            meta[name] = {"t": "np", "dtype": value.dtype.str, "v": value.item()}
        elif value is None or isinstance(value, (bool, int, float, str)):
            meta[name] = {"t": "py", "v": value}
        else:
            raise TypeError(f"cannot checkpoint attribute {name!r} of type {type(value).__name__}")
    return meta, arrays


def restore_attrs(obj: object, meta: dict[str, Any], arrays: Arrays, prefix: str) -> None:
    """Inverse of `dump_attrs`: set every recorded attribute on obj."""
    for name, m in meta.items():
        key = f"{prefix}{name}"
        if m["t"] == "rng":
            rng = np.random.RandomState()
            rng.set_state((m["kind"], arrays[key], m["pos"], m["has_gauss"], m["g"]))
            value: Any = rng
        elif m["t"] == "array":
            value = arrays[key].copy()
        elif m["t"] == "np":
            value = np.dtype(m["dtype"]).type(m["v"])
        else:
            value = m["v"]
        setattr(obj, name, value)


class Strategy(ABC):
    """One ask/tell interface: `ask()` -> (population, d) candidates, `tell(candidates, fitness)` (higher is better).

    Also tracks the best candidate told so far, for `returned_point: best` (docs/algorithms.md sec. 6.5). Its fitness is
    on a different minibatch each generation, so "best" is optimistic; the distribution mean is the default.
    """

    kind: str

    def __init__(self, dimension: int, population: int, returned_point: str = "mean"):
        self.dimension = dimension
        self.population = population
        self.returned_point = returned_point
        self.best_fitness = -np.inf
        self.best_point = np.zeros(dimension)

    def ask(self) -> np.ndarray:
        """The next generation's candidates, shape (population, dimension), float64."""
        with one_blas_thread():
            return self._ask()

    @abstractmethod
    def _ask(self) -> np.ndarray: ...

    @abstractmethod
    def _tell(self, candidates: np.ndarray, fitness: np.ndarray) -> None: ...

    @property
    @abstractmethod
    def mean(self) -> np.ndarray:
        """Centre of the search distribution."""

    @property
    @abstractmethod
    def sigma(self) -> float:
        """Current step size."""

    @abstractmethod
    def _core(self) -> object:
        """The object whose attributes are the optimiser state."""

    @abstractmethod
    def _set_core(self, core: object) -> None: ...

    def tell(self, candidates: np.ndarray, fitness: np.ndarray) -> None:
        """Update on one fitness per candidate, in ask order."""
        fitness = np.asarray(fitness, dtype=np.float64)
        if candidates.shape != (self.population, self.dimension) or fitness.shape != (self.population,):
            raise ValueError(
                f"tell needs {self.population} candidates of dimension {self.dimension} and one fitness each, "
                f"got {candidates.shape} and {fitness.shape}"
            )
        best = int(np.argmax(fitness))  # first of the tied best
        if fitness[best] > self.best_fitness:
            self.best_fitness = float(fitness[best])
            self.best_point = candidates[best].copy()
        with one_blas_thread():
            self._tell(candidates, fitness)

    def result(self) -> np.ndarray:
        """The returned point: the distribution mean (default) or the best candidate seen
        (docs/algorithms.md sec. 6.5)."""
        return (self.best_point if self.returned_point == "best" else self.mean).copy()

    def state_dict(self) -> tuple[dict[str, Any], Arrays]:
        core = self._core()
        meta, arrays = dump_attrs(core, "core.")
        arrays["best_point"] = self.best_point
        return {
            "kind": self.kind,
            "core_class": type(core).__name__,
            "core": meta,
            "best_fitness": self.best_fitness,
            "dimension": self.dimension,
            "population": self.population,
        }, arrays

    def load_state_dict(self, meta: dict[str, Any], arrays: Arrays) -> None:
        if (meta["kind"], meta["dimension"], meta["population"]) != (self.kind, self.dimension, self.population):
            raise ValueError(
                f"checkpoint holds strategy {meta['kind']} (d={meta['dimension']}, population={meta['population']}), "
                f"config asks {self.kind} (d={self.dimension}, population={self.population})"
            )
        core = type(self._core()).__new__(type(self._core()))
        restore_attrs(core, meta["core"], arrays, "core.")
        self._set_core(core)
        self.best_fitness = float(meta["best_fitness"])
        self.best_point = arrays["best_point"].copy()


class CMAStrategy(Strategy):
    """CMA-ES via `cmaes.CMA` (full covariance) or `cmaes.SepCMA` (diagonal) (ESSA-v3 sec. 3.2;
    docs/algorithms.md sec. 2.4-2.5).

    Library defaults throughout (weights, c_sigma, d_sigma, c_c, c_1, c_mu; `cmaes.CMA` also uses the active
    negative weights of Hansen's 2016 tutorial), no bounds (docs/algorithms.md sec. 6.3), mean 0 = the SFT point, C = I.
    """

    def __init__(self, dimension: int, population: int, sigma0: float, seed: int, separable: bool = False, **kw: Any):
        super().__init__(dimension, population, **kw)
        self.kind = "sep_cma" if separable else "cma"
        cls = SepCMA if separable else CMA
        self._opt = cls(mean=np.zeros(dimension), sigma=sigma0, seed=seed, population_size=population)

    def _ask(self) -> np.ndarray:
        return np.stack([self._opt.ask() for _ in range(self.population)])

    def _tell(self, candidates: np.ndarray, fitness: np.ndarray) -> None:
        self._opt.tell([(x, -f) for x, f in zip(candidates, fitness)])  # cmaes minimises

    @property
    def mean(self) -> np.ndarray:
        return self._opt.mean.copy()

    @property
    def sigma(self) -> float:
        return float(self._opt._sigma)

    def _core(self) -> object:
        return self._opt

    def _set_core(self, core: object) -> None:
        self._opt = core  # type: ignore[assignment]


class _ESState:
    """The antithetic ES state: plain attributes so `dump_attrs` checkpoints it like a cmaes object."""

    def __init__(self, dimension: int, sigma: float, lr: float, seed: int):
        self.mean = np.zeros(dimension)
        self.sigma = float(sigma)
        self.lr = float(lr)
        self.rng = np.random.RandomState(seed)
        self.eps = np.zeros((0, dimension))  # noise of the generation asked and not yet told
        self.generation = 0


def centered_ranks(fitness: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-0.5, 0.5], tied fitnesses sharing their mean rank (so a tie moves nothing).

    With many ties (a coarse reward on a small minibatch) z-scores give the few distinct values huge weights;
    ranks bound every weight and leave tied candidates exactly at their group's mean.
    """
    f = np.asarray(fitness, dtype=np.float64)
    order = np.argsort(f, kind="stable")
    ranks = np.empty(len(f))
    ranks[order] = np.arange(len(f), dtype=np.float64)
    for value in np.unique(f):  # ties: the mean of the ranks they occupy
        tied = f == value
        ranks[tied] = ranks[tied].mean()
    return ranks / max(len(f) - 1, 1) - 0.5


def shaped_fitness(fitness: np.ndarray, shaping: str) -> np.ndarray:
    """The weights ES gives each candidate's noise: z-scores (Qiu et al.) or centred ranks."""
    if shaping == "centered_rank":
        return centered_ranks(fitness)
    return (fitness - fitness.mean()) / (fitness.std() + 1e-8)  # Qiu's code adds 1e-8


class GaussianES(Strategy):
    """Plain Gaussian ES with z-scored fitness (Qiu et al.; docs/algorithms.md sec. 2.6), antithetic pairs by default.

    sigma stays fixed (no step-size adaptation in Qiu's method); the update is m <- m + (lr/N) sum Z_n eps_n with
    Z = (F - mean F) / (std F + 1e-8) (Qiu's code adds 1e-8; or centred ranks, `shaping`, whose bounded scale
    wants a smaller lr) and N = population. With `antithetic` (default, the
    peer baseline) members 2i and 2i+1 are m +- sigma e_i: the even part of the reward cancels,
    but N candidates probe only N/2 directions. `antithetic=False` is Qiu's original i.i.d. sampling, which probes
    N directions and is the better use of a budget when the reward is close to linear at scale sigma.
    """

    kind = "es"

    def __init__(
        self,
        dimension: int,
        population: int,
        sigma0: float,
        lr: float,
        seed: int,
        antithetic: bool = True,
        shaping: str = "zscore",
        **kw: Any,
    ):
        if antithetic and population % 2:
            raise ValueError(f"essa.population={population} must be even for antithetic pairs (essa.strategy=es)")
        super().__init__(dimension, population, **kw)
        self.antithetic = antithetic
        self.shaping = shaping
        self._s = _ESState(dimension, sigma0, lr, seed)

    def _ask(self) -> np.ndarray:
        s = self._s
        if self.antithetic:
            half = s.rng.randn(self.population // 2, self.dimension)
            s.eps = np.empty((self.population, self.dimension))
            s.eps[0::2], s.eps[1::2] = half, -half
        else:
            s.eps = s.rng.randn(self.population, self.dimension)
        return s.mean + s.sigma * s.eps

    def _tell(self, candidates: np.ndarray, fitness: np.ndarray) -> None:
        s = self._s
        if s.eps.shape[0] != self.population or not np.array_equal(candidates, s.mean + s.sigma * s.eps):
            raise ValueError("tell must receive exactly the candidates of the last ask, in order")
        z = shaped_fitness(fitness, self.shaping)
        s.mean = s.mean + (s.lr / self.population) * (z @ s.eps)
        s.eps = np.zeros((0, self.dimension))
        s.generation += 1

    @property
    def mean(self) -> np.ndarray:
        return self._s.mean.copy()

    @property
    def sigma(self) -> float:
        return self._s.sigma

    def _core(self) -> object:
        return self._s

    def _set_core(self, core: object) -> None:
        self._s = core  # type: ignore[assignment]


def make_strategy(cfg: ESSAConfig, dimension: int) -> Strategy:
    """The strategy named by essa.strategy, seeded by essa.seed, starting at zero offset
    (docs/algorithms.md sec. 6.2)."""
    common = {"returned_point": cfg.returned_point}
    if cfg.strategy == "es":
        return GaussianES(
            dimension,
            cfg.population,
            cfg.sigma0,
            cfg.es_lr,
            cfg.seed,
            antithetic=cfg.es_antithetic,
            shaping=cfg.fitness_shaping,
            **common,
        )
    return CMAStrategy(dimension, cfg.population, cfg.sigma0, cfg.seed, separable=cfg.strategy == "sep_cma", **common)
