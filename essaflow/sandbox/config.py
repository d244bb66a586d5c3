"""The `sandbox` settings: where model-written code runs (bubblewrap, or no isolation for trusted setups) and the
limits every snippet runs under (docs/rewards.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from essaflow.config_base import StrictConfig


class SandboxConfig(StrictConfig):
    """How model-written code is run: a pool of long-lived sandboxed workers, one fresh child per snippet."""

    kind: Literal["bubblewrap", "none"] = "bubblewrap"
    """bubblewrap: each worker in its own namespaces (no network, read-only root, private /tmp, no home, empty
    environment, unprivileged uid). none: a plain subprocess with the limits below but no isolation; opt in only
    where every completion is trusted."""
    bwrap_path: str = "bwrap"
    """The bubblewrap binary: a name looked up on PATH or a path (Debian package `bubblewrap`; `make install`)."""
    python: str | None = None
    """Interpreter the workers run inside the sandbox; None: this process's base interpreter (no venv), or the
    system python3 when the sandbox's unprivileged user cannot read it (a root whose Python lives under /root)."""
    workers: int = Field(2, ge=1)
    """Pool size: snippets run concurrently on this many long-lived workers."""
    timeout_s: float = Field(5.0, gt=0)
    """Wall-clock limit per snippet; its process group is killed past it and it scores as a timeout."""
    cpu_s: int = Field(5, ge=1)
    """CPU seconds per snippet (RLIMIT_CPU)."""
    memory_mb: int = Field(512, ge=32)
    """Address space per snippet process in MiB (RLIMIT_AS): an allocation past it raises MemoryError."""
    max_processes: int = Field(32, ge=4)
    """Processes of the sandbox's user (RLIMIT_NPROC), counted inside the worker's own user namespace: the worker
    and the namespace's init take two, the snippet itself one; stops fork bombs."""
    file_size_mb: int = Field(16, ge=0)
    """Largest file a snippet may write, in MiB (RLIMIT_FSIZE)."""
    output_bytes: int = Field(64 * 1024, ge=1024)
    """Cap on a snippet's captured stdout and stderr together: past it the snippet is killed and fails."""
    scratch_mb: int = Field(64, ge=1)
    """Size of the sandbox's private /tmp (and of /dev/shm) in MiB; wiped after every snippet."""
    hidden_paths: list[str] = ["/root", "/home", "/run"]
    """Host folders replaced by an empty read-only folder inside the sandbox (credentials, sockets), besides the
    user's $HOME; those missing on the host are skipped."""
    memo_size: int = Field(65536, ge=0)
    """Verdicts remembered per process, by the exact bytes of the snippet (program and tests): a snippet judged
    once is not run again. ESSA's candidates share a generation's problems and differ a little, so most of them
    write a program another candidate already wrote; 0 runs every snippet. Verdicts live in memory only."""
