"""Running model-written code: bubblewrap sandboxes, a pool of long-lived workers, the code_tests scores."""

from essaflow.sandbox.bubblewrap import SandboxUnavailable, bwrap_argv, require_bubblewrap
from essaflow.sandbox.code_tests import VerdictMemo, code_tests_scores, extract_program, shared_memo, shared_pool
from essaflow.sandbox.config import SandboxConfig
from essaflow.sandbox.pool import Outcome, SandboxPool

__all__ = [
    "Outcome",
    "SandboxConfig",
    "SandboxPool",
    "SandboxUnavailable",
    "VerdictMemo",
    "bwrap_argv",
    "code_tests_scores",
    "extract_program",
    "require_bubblewrap",
    "shared_memo",
    "shared_pool",
]
