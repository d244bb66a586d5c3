"""The per-iteration latency model of ESSA-v3 (arXiv 2507.04453, sec. 3.3 and App. B), and time to accuracy.

Gradient RL on G GPUs splits them: a share theta trains (forward/backward), 1 - theta generates rollouts. With B
sequences an iteration, eta_fb / eta_gen seconds per sequence on one instance of m_fb / m_gen GPUs, the stages
run side by side, so the iteration takes the slower one, T(theta) = max(T_fb, T_gen), with

    T_fb = B m_fb eta_fb / (theta G),   T_gen = B m_gen eta_gen / ((1 - theta) G)

They are equal at theta* = m_fb eta_fb / (m_fb eta_fb + m_gen eta_gen), which gives (App. B)

    T*_grad = (B / G) (m_fb eta_fb + m_gen eta_gen) + 2 M (G - 1) / (G bw)

the last term a ring all-reduce (reduce-scatter + all-gather) of the M trainable bytes at bw bytes/s per GPU. An
ESSA generation is inference only: N_pop candidates each scored on b prompts, plus the seed and reward traffic,

    T_essa = N_pop b m_gen eta_gen / G + M_essa (G - 1) / (G bw)

Theorem B.2: ESSA's iteration is the faster one if N_pop b < B (eta_fb / (G eta_gen) + 1) + (G - 1) M /
(bw G eta_gen), given m_fb >= 1, m_gen <= G and 2 M - M_essa >= M. It is a sufficient condition, exact when m_fb = 1,
m_gen = G and M_essa = M; `essa_iteration_faster` is the direct comparison.

Beyond the paper: each iteration may carry an `overhead_s` that does not shrink with G (weight sync to the
generation engine, the driver's ask/tell, ...), and `allreduces` counts the all-reduces of M per iteration (one per
optimizer mini-batch). Time to accuracy = iterations to the target x iteration time: the iteration count depends on
the algorithm and its batch, not on G, so it is an input (calibrated or read from a run).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


class ProjectionError(ValueError):
    """An input the latency model cannot use (non-positive counts, negative costs, inconsistent calibration)."""


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ProjectionError(f"{name} must be > 0, got {value!r}")


def _non_negative(name: str, value: float) -> None:
    if not value >= 0:  # also rejects NaN
        raise ProjectionError(f"{name} must be >= 0, got {value!r}")


def _gpus(gpus: int) -> int:
    if isinstance(gpus, bool) or int(gpus) != gpus or gpus < 1:
        raise ProjectionError(f"GPU count must be a whole number >= 1, got {gpus!r}")
    return int(gpus)


@dataclass(frozen=True)
class GradIteration:
    """One iteration of gradient RL (GRPO): the inputs of T*_grad (ESSA-v3 App. B)."""

    batch: float
    """B_grad: sequences generated and trained per iteration (prompts x rollouts per prompt)."""
    eta_fb: float
    """Seconds of forward + backward per sequence on one training instance (old log-probs included)."""
    eta_gen: float
    """Seconds of generation per sequence on one generation instance."""
    trainable_bytes: float
    """M: bytes of the gradients one all-reduce carries (the trainable parameters x bytes per value)."""
    m_fb: int = 1
    """GPUs per training instance (only m_fb x eta_fb enters T*; Theorem B.2 assumes m_fb >= 1)."""
    m_gen: int = 1
    """GPUs per generation instance (Theorem B.2 assumes m_gen <= G)."""
    allreduces: int = 1
    """All-reduces of M per iteration: one per optimizer mini-batch (App. B counts one)."""
    overhead_s: float = 0.0
    """Seconds per iteration that do not shrink with G (not in App. B; calibrated or measured)."""

    def __post_init__(self) -> None:
        _positive("batch", self.batch)
        _positive("eta_fb", self.eta_fb)
        _positive("eta_gen", self.eta_gen)
        _non_negative("trainable_bytes", self.trainable_bytes)
        _non_negative("overhead_s", self.overhead_s)
        for name in ("m_fb", "m_gen", "allreduces"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ProjectionError(f"{name} must be a whole number >= 1, got {getattr(self, name)!r}")

    @property
    def gpu_s_fb(self) -> float:
        return self.m_fb * self.eta_fb

    @property
    def gpu_s_gen(self) -> float:
        return self.m_gen * self.eta_gen


@dataclass(frozen=True)
class EssaIteration:
    """One ESSA generation: the inputs of T_essa (ESSA-v3 App. B)."""

    population: int
    """N_pop (lambda): candidates per generation."""
    minibatch: int
    """b: prompts each candidate is scored on."""
    eta_gen: float
    """Seconds of generation per sequence on one instance (the same engine cost as GRPO's rollouts)."""
    bytes_per_generation: float
    """M_essa: bytes exchanged per generation (paper: seed + reward, 2 x 4 bytes; essaflow measures its own)."""
    m_gen: int = 1
    """GPUs per scoring instance (ESSA-v3 sec. 4: one model per GPU)."""
    overhead_s: float = 0.0
    """Seconds per generation that do not shrink with G (the driver's ask/tell; measured in a run)."""

    def __post_init__(self) -> None:
        _positive("population", self.population)
        _positive("minibatch", self.minibatch)
        _positive("eta_gen", self.eta_gen)
        _non_negative("bytes_per_generation", self.bytes_per_generation)
        _non_negative("overhead_s", self.overhead_s)
        if int(self.m_gen) != self.m_gen or self.m_gen < 1:
            raise ProjectionError(f"m_gen must be a whole number >= 1, got {self.m_gen!r}")


def theta_star(g: GradIteration) -> float:
    """The GPU share for training that balances the two stages (ESSA-v3 App. B)."""
    return g.gpu_s_fb / (g.gpu_s_fb + g.gpu_s_gen)


def ring_allreduce_s(nbytes: float, gpus: int, bandwidth: float) -> float:
    """A ring all-reduce of nbytes over G GPUs: each sends and receives 2 (G - 1) / G x nbytes at bw bytes/s."""
    _non_negative("bytes", nbytes)
    _positive("bandwidth", bandwidth)
    gpus = _gpus(gpus)
    return 2.0 * nbytes * (gpus - 1) / (gpus * bandwidth)


def grad_iteration_s(g: GradIteration, gpus: int, bandwidth: float, theta: float | None = None) -> float:
    """T_grad on G GPUs: max(T_fb, T_gen) at split theta (default theta*) + all-reduces + overhead."""
    gpus = _gpus(gpus)
    if theta is None:
        compute = g.batch * (g.gpu_s_fb + g.gpu_s_gen) / gpus
    else:
        if not 0 < theta < 1:
            raise ProjectionError(f"theta must be in (0, 1), got {theta!r}")
        compute = max(g.batch * g.gpu_s_fb / (theta * gpus), g.batch * g.gpu_s_gen / ((1 - theta) * gpus))
    return compute + g.allreduces * ring_allreduce_s(g.trainable_bytes, gpus, bandwidth) + g.overhead_s


def essa_iteration_s(e: EssaIteration, gpus: int, bandwidth: float) -> float:
    """T_essa on G GPUs: population x minibatch inference spread over G, + seed/reward traffic + overhead."""
    gpus = _gpus(gpus)
    _positive("bandwidth", bandwidth)
    inference = e.population * e.minibatch * e.m_gen * e.eta_gen / gpus
    return inference + e.bytes_per_generation * (gpus - 1) / (gpus * bandwidth) + e.overhead_s


def _idealized(g: GradIteration, e: EssaIteration) -> tuple[GradIteration, EssaIteration]:
    """The iterations as App. B has them: one all-reduce, no overheads."""
    return replace(g, allreduces=1, overhead_s=0.0), replace(e, overhead_s=0.0)


def essa_iteration_faster(g: GradIteration, e: EssaIteration, gpus: int, bandwidth: float) -> bool:
    """The direct comparison T_essa < T*_grad of App. B's idealized iterations."""
    g, e = _idealized(g, e)
    return essa_iteration_s(e, gpus, bandwidth) < grad_iteration_s(g, gpus, bandwidth)


def theorem_b2_holds(g: GradIteration, e: EssaIteration, gpus: int, bandwidth: float) -> bool:
    """Theorem B.2's sufficient condition for ESSA's iteration to be faster (ESSA-v3 App. B); like App. B it takes
    one per-sequence generation cost for both methods, GRPO's eta_gen."""
    gpus = _gpus(gpus)
    _positive("bandwidth", bandwidth)
    rhs = g.batch * (g.eta_fb / (gpus * g.eta_gen) + 1) + (gpus - 1) * g.trainable_bytes / (
        bandwidth * gpus * g.eta_gen
    )
    return e.population * e.minibatch < rhs


def theorem_b2_assumptions(g: GradIteration, e: EssaIteration, gpus: int) -> bool:
    """The theorem's premises: m_fb >= 1, m_gen <= G (both methods), 2 M - M_essa >= M."""
    return g.m_fb >= 1 and max(g.m_gen, e.m_gen) <= gpus and g.trainable_bytes >= e.bytes_per_generation


@dataclass(frozen=True)
class ProjectionRow:
    """Both methods on G GPUs: iteration seconds and, when iteration counts are known, time to the target."""

    gpus: int
    """G."""
    grad_iteration_s: float
    """T_grad: one gradient iteration at theta*, all-reduces and overhead included."""
    essa_iteration_s: float
    """T_essa: one ESSA generation."""
    grad_to_target_s: float | None = None
    """Gradient iterations to target x T_grad."""
    essa_to_target_s: float | None = None
    """ESSA generations to target x T_essa."""

    @property
    def iteration_speedup(self) -> float:
        """How many ESSA generations fit in one gradient iteration."""
        return self.grad_iteration_s / self.essa_iteration_s

    @property
    def speedup(self) -> float | None:
        """ESSA's time-to-accuracy speed-up over GRPO (None without iteration counts)."""
        if self.grad_to_target_s is None or self.essa_to_target_s is None:
            return None
        return self.grad_to_target_s / self.essa_to_target_s


@dataclass(frozen=True)
class Projection:
    """The latency model evaluated on a list of GPU counts."""

    grad: GradIteration
    essa: EssaIteration
    bandwidth: float
    """Bytes/s per GPU of the links the collectives use."""
    grad_iterations: float | None = None
    """Gradient iterations to the target accuracy (None: per-iteration figures only)."""
    essa_iterations: float | None = None
    """ESSA generations to the target accuracy."""
    notes: dict[str, object] = field(default_factory=dict)
    """Where each input came from (physical, calibrated, measured), for the report."""
    per_sequence: bool = True
    """Whether both eta_gen are seconds per sequence; Theorem B.2 compares them (False: ESSA's is per candidate)."""

    def __post_init__(self) -> None:
        _positive("bandwidth", self.bandwidth)
        for name in ("grad_iterations", "essa_iterations"):
            if getattr(self, name) is not None:
                _positive(name, getattr(self, name))

    def row(self, gpus: int) -> ProjectionRow:
        tg = grad_iteration_s(self.grad, gpus, self.bandwidth)
        te = essa_iteration_s(self.essa, gpus, self.bandwidth)
        known = self.grad_iterations is not None and self.essa_iterations is not None
        return ProjectionRow(
            gpus=_gpus(gpus),
            grad_iteration_s=tg,
            essa_iteration_s=te,
            grad_to_target_s=self.grad_iterations * tg if known else None,
            essa_to_target_s=self.essa_iterations * te if known else None,
        )

    def rows(self, gpu_counts: list[int]) -> list[ProjectionRow]:
        if not gpu_counts:
            raise ProjectionError("no GPU counts to project")
        return [self.row(g) for g in gpu_counts]


def doubling_gpus(up_to: int = 128) -> list[int]:
    """1, 2, 4, ..., up_to."""
    counts, g = [], 1
    while g <= _gpus(up_to):
        counts.append(g)
        g *= 2
    return counts


def calibrate_grad(base: GradIteration, bandwidth: float, minutes: dict[int, float]) -> tuple[float, GradIteration]:
    """Gradient iterations to target and the non-scaling overhead per iteration from times at two GPU counts.

    With K iterations and overhead O: K (S / G + A_G + O) = t_G at each G, S = B (m_fb eta_fb + m_gen eta_gen) and
    A_G the all-reduces; two G give K and O. A negative O means the times scale better than the model allows."""
    if len(minutes) != 2:
        raise ProjectionError(f"calibration needs times at exactly two GPU counts, got {sorted(minutes)}")
    (g1, t1), (g2, t2) = sorted(minutes.items())
    _positive("time", t1)
    _positive("time", t2)
    ideal = replace(base, overhead_s=0.0)
    a1, a2 = grad_iteration_s(ideal, g1, bandwidth), grad_iteration_s(ideal, g2, bandwidth)
    if a1 <= a2:
        raise ProjectionError(f"the iteration does not get faster from {g1} to {g2} GPUs: nothing to calibrate")
    iterations = (t1 - t2) * 60.0 / (a1 - a2)
    overhead = t1 * 60.0 / iterations - a1
    if overhead < 0:
        raise ProjectionError(
            f"GRPO's times ({t1:g} min on {g1} GPUs, {t2:g} on {g2}) scale better than the model's 1/G: "
            f"negative overhead {overhead:.3g} s per iteration"
        )
    return iterations, replace(base, overhead_s=overhead)


def calibrate_essa(base: EssaIteration, bandwidth: float, gpus: int, minutes: float) -> float:
    """ESSA generations to target from its time at one GPU count (the model has no other free term)."""
    _positive("time", minutes)
    return minutes * 60.0 / essa_iteration_s(base, gpus, bandwidth)


def summary(p: Projection, at: tuple[int, ...] = (16, 128)) -> dict[str, float | None]:
    """The figures the JSON line carries: speed-ups (time to accuracy, and per iteration) at the given G."""
    out: dict[str, float | None] = {}
    for gpus in at:
        r = p.row(gpus)
        out[f"speedup_{gpus}"] = None if r.speedup is None else round(r.speedup, 2)
        out[f"iteration_speedup_{gpus}"] = round(r.iteration_speedup, 4)
    return out


def table(p: Projection, gpu_counts: list[int], title: str) -> str:
    """A plain-text table: per-iteration seconds, minutes to target and ESSA's speed-up per GPU count."""
    lines = [
        title,
        f"{'GPUs':>5} {'GRPO it s':>10} {'ESSA gen s':>10} {'GRPO min':>9} {'ESSA min':>9} {'speed-up':>9} "
        f"{'per-iter':>9} {'B.2':>4}",
    ]
    for r in p.rows(gpu_counts):
        known = r.speedup is not None
        b2 = "n/a" if not p.per_sequence else "yes" if theorem_b2_holds(p.grad, p.essa, r.gpus, p.bandwidth) else "no"
        lines.append(
            f"{r.gpus:>5} {r.grad_iteration_s:>10.3g} {r.essa_iteration_s:>10.3g} "
            f"{(r.grad_to_target_s / 60 if known else float('nan')):>9.4g} "
            f"{(r.essa_to_target_s / 60 if known else float('nan')):>9.4g} "
            f"{(r.speedup if known else float('nan')):>8.2f}x {r.iteration_speedup:>8.3g}x {b2:>4}"
        )
    return "\n".join(lines)
