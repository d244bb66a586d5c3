"""The ESSA-v3 latency model (arXiv 2507.04453 App. B): the paper's settings and a run's measured costs."""

from essaflow.projection.latency import (  # noqa: F401
    EssaIteration,
    GradIteration,
    Projection,
    ProjectionError,
    ProjectionRow,
    calibrate_essa,
    calibrate_grad,
    doubling_gpus,
    essa_iteration_faster,
    essa_iteration_s,
    grad_iteration_s,
    ring_allreduce_s,
    summary,
    table,
    theorem_b2_assumptions,
    theorem_b2_holds,
    theta_star,
)
