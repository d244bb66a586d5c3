"""The bubblewrap command line that isolates a worker, the user it runs as, and the check that it can run here.

Inside: no network (a network namespace of its own: the host's 127.0.0.1 is another machine), a read-only root, a
private size-capped /tmp and /dev/shm, /root, /home, /run and $HOME replaced by empty read-only folders, its own
pid, IPC, UTS and cgroup namespaces, uid 65534 with no capabilities, no further user namespaces, an empty
environment. When this process is root, bwrap itself runs as uid 65534 too (`sandbox_popen_kwargs`): a root-owned
process is exempt from RLIMIT_NPROC and may read every file root owns, sandbox or not.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from essaflow.sandbox.config import SandboxConfig

#: the unprivileged uid and gid inside the sandbox (and outside it, when this process is root)
SANDBOX_UID = 65534
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
INSTALL_HINT = "install the Debian package `bubblewrap` (`make install` does, or `apt-get install bubblewrap`)"
# never hidden, nor any folder above them: the sandbox needs them, or mounts its own
_NEEDED = ("/tmp", "/dev", "/proc", "/usr", "/bin", "/lib", "/etc")
_PROBE_TIMEOUT_S = 60


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here; the message says what to install or allow."""


def bwrap_argv(cfg: SandboxConfig) -> list[str]:
    """The bwrap command line up to the program it runs (which follows it: an interpreter and its arguments)."""
    scratch = str(cfg.scratch_mb << 20)
    argv = [shutil.which(cfg.bwrap_path) or cfg.bwrap_path, "--ro-bind", "/", "/", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--size", scratch, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--size", scratch, "--tmpfs", "/tmp", "--chdir", "/tmp"]
    argv += ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid"]
    argv += [str(SANDBOX_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    argv += ["--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"]
    hidden = hidden_folders(cfg)
    for folder in hidden:
        argv += ["--size", "4096", "--tmpfs", folder]
    prefix = str(Path(sandbox_python(cfg)).parents[1])  # .../bin/python3 -> its installation, stdlib included
    if any(_within(prefix, folder) for folder in hidden):  # a Python under $HOME (pyenv): shown again, read-only
        argv += ["--ro-bind", prefix, prefix]
    for folder in hidden:
        argv += ["--remount-ro", folder]
    return argv


def hidden_folders(cfg: SandboxConfig) -> list[str]:
    """The host folders the sandbox sees empty: cfg.hidden_paths and $HOME, symlinks resolved, those missing
    dropped, and none that holds (or is) a folder the sandbox needs."""
    wanted = [*cfg.hidden_paths, os.environ.get("HOME", "")]
    found = sorted({os.path.realpath(p) for p in wanted if p and os.path.isdir(p)})
    found = [p for p in found if not any(_within(needed, p) for needed in _NEEDED)]
    return [p for p in found if not any(p != q and _within(p, q) for q in found)]  # /home/u goes with /home


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def drops_to_nobody() -> bool:
    """Whether bwrap runs as uid 65534 rather than as this process (true for root, see the module docstring)."""
    return os.geteuid() == 0


def sandbox_popen_kwargs() -> dict:
    """subprocess keywords for starting bwrap: an empty environment (bwrap's own would show in /proc/1/environ
    inside) and, for root, uid and gid 65534 without supplementary groups."""
    kwargs: dict = {"env": {}, "close_fds": True}
    if drops_to_nobody():
        kwargs.update(user=SANDBOX_UID, group=SANDBOX_UID, extra_groups=[])
    return kwargs


def sandbox_python(cfg: SandboxConfig) -> str:
    """The interpreter the workers run inside the sandbox, symlinks resolved: cfg.python, else this process's base
    interpreter (a venv's site-packages are not the snippets' business), else, when the sandbox's user cannot
    read that one, the system python3."""
    if cfg.python:
        found = shutil.which(cfg.python)
        if not found:
            raise SandboxUnavailable(f"sandbox.python {cfg.python!r} is not an executable file")
        return os.path.realpath(found)
    own = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if not drops_to_nobody() or _world_executable(own):
        return own
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(candidate) and _world_executable(os.path.realpath(candidate)):
            return os.path.realpath(candidate)
    raise SandboxUnavailable(
        f"no Python the sandbox's user (uid {SANDBOX_UID}) can run: {own} is not readable by others and there is no "
        "/usr/bin/python3; install python3 (apt-get install python3) or set sandbox.python"
    )


def _world_executable(path: str) -> bool:
    """Whether any user may run `path`: every folder above it searchable by others, the file readable and
    executable by others."""
    file = Path(path)
    folders_ok = all(os.stat(p).st_mode & stat.S_IXOTH for p in file.parents)
    mode = os.stat(file).st_mode
    return folders_ok and bool(mode & stat.S_IROTH) and bool(mode & stat.S_IXOTH)


def require_bubblewrap(cfg: SandboxConfig | None = None) -> None:
    """Raise SandboxUnavailable, naming the package to install, unless bwrap exists and can start a sandbox with
    cfg's interpreter here; a probe that passed is not run again for the same command line."""
    cfg = cfg or SandboxConfig()
    if not shutil.which(cfg.bwrap_path):
        raise SandboxUnavailable(f"bubblewrap not found ({cfg.bwrap_path!r}: no such executable): {INSTALL_HINT}")
    _probe((*bwrap_argv(cfg), sandbox_python(cfg), "-I", "-c", "pass"))


@functools.lru_cache(maxsize=8)  # successes only: a probe that raised runs again next time
def _probe(argv: tuple[str, ...]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, **sandbox_popen_kwargs())
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SandboxUnavailable(f"bubblewrap could not start a sandbox ({err}): {INSTALL_HINT}") from err
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
        raise SandboxUnavailable(
            f"bubblewrap cannot create a sandbox here ({why}). It needs unprivileged user namespaces (sysctl "
            "kernel.unprivileged_userns_clone=1, Ubuntu's kernel.apparmor_restrict_unprivileged_userns=0, a "
            f"container allowed to unshare); {INSTALL_HINT}. sandbox.kind: none runs code without isolation."
        )
