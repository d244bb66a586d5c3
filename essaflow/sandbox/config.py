"""The `sandbox` settings: where model-written code runs (bubblewrap, or no isolation for trusted setups) and the
limits every snippet runs under (docs/rewards.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from essaflow.config_base import StrictConfig


class SandboxConfig(StrictConfig):
    """How model-written code is run: a pool of long-lived sandboxed workers, one fresh child per snippet."""

    kind: Literal["bubblewrap", "none"] = "bubblewrap"
    """bubblewrap: each worker in its own namespaces (no network, a filesystem of the interpreter's own files and
    nothing else of the host, private /tmp and working folder, empty environment, unprivileged uid). none: a plain
    subprocess with the limits below but no isolation; opt in only where every completion is trusted."""
    bwrap_path: str = "bwrap"
    """The bubblewrap binary: a name looked up on PATH or a path (Debian package `bubblewrap`; `make install`)."""
    python: str | None = None
    """Interpreter the workers run inside the sandbox; None: this process's base interpreter (no venv), or the
    system python3 when the sandbox's unprivileged user cannot read it (a root whose Python lives under /root).
    The sandbox shows its executable, standard library and the shared libraries they link, at their own paths."""
    packages: list[str] = []
    """Third-party packages the snippets may import (bubblewrap only), by top-level import name (`numpy`,
    `sympy`): each package's own folder (and the `<name>.libs` folder of libraries its wheel carries) is found in
    this process's environment without importing it and shown read-only under /packages. Empty: the standard
    library alone. Part of the evaluation protocol, since what a snippet may import changes its verdict."""
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
    """Size in MiB of each of the sandbox's private writable folders: /tmp, the working folder /sandbox and
    /dev/shm; all wiped after every snippet."""
    memo_size: int = Field(65536, ge=0)
    """Verdicts remembered per process, by the exact bytes of the snippet (program and tests): a snippet judged
    once is not run again. ESSA's candidates share a generation's problems and differ a little, so most of them
    write a program another candidate already wrote; 0 runs every snippet. Verdicts live in memory only."""

    @model_validator(mode="before")
    @classmethod
    def _no_hidden_paths(cls, data: Any) -> Any:
        if isinstance(data, dict) and "hidden_paths" in data:
            raise ValueError(
                "hidden_paths is gone: the sandbox no longer starts from the host's root, so there is nothing to "
                "hide; it shows only the interpreter's own files (docs/rewards.md). Delete the field"
            )
        return data

    @field_validator("packages")
    @classmethod
    def _top_level_names(cls, v: list[str]) -> list[str]:
        bad = [name for name in v if not (isinstance(name, str) and name.isidentifier())]
        if bad:
            raise ValueError(f"{bad}: not top-level import names; give names such as numpy or sympy")
        return list(dict.fromkeys(v))

    def judged_as(self) -> str:
        """How a result judged in this sandbox says so (EvalConfig.judged_with, hence the protocol digest): its
        kind and, when there are any, the packages its snippets could import."""
        if self.kind == "none":
            return "none (unsandboxed: trusted code only)"
        return "bubblewrap" + (f" with packages {','.join(sorted(self.packages))}" if self.packages else "")
