"""The bubblewrap command line that isolates a worker, the user it runs as, and the check that it can run here.

Inside: no network (a network namespace of its own: the host's 127.0.0.1 is another machine) and a filesystem of
the interpreter's own and nothing else of the host (`sandbox_layout`): its executable, its standard library, the
shared libraries they link and the few files of /etc they read, each bound read-only at its own path (symlinks on
the way recreated), on a read-only root of bwrap's own; private size-capped /tmp, /sandbox (the working folder)
and /dev/shm; a /proc and a minimal /dev; the packages cfg.packages names under /packages. Its own pid, IPC, UTS
and cgroup namespaces, uid 65534 with no capabilities, no further user namespaces, an empty environment. When this
process is root, bwrap itself runs as uid 65534 too (`sandbox_popen_kwargs`): a root-owned process is exempt from
RLIMIT_NPROC and may read every file root owns, sandbox or not.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import re
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
#: the snippets' working folder inside the sandbox (a private tmpfs, like /tmp)
WORK_DIR = "/sandbox"
#: where the packages of cfg.packages are shown, each by its own folder; on the workers' sys.path
PACKAGES_DIR = "/packages"
#: files of /etc that the C library and Python read at start (the loader's cache, the local time zone), and the
#: locale the sandbox's LANG names; those missing here are skipped
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime", "/usr/lib/locale/C.utf8")
#: what the interpreter says of itself: run as `python -I -S -c`, so sys.path is its standard library alone
_QUERY = """import json, sys, sysconfig
paths = sysconfig.get_paths()
print(json.dumps({"path": sys.path, "site": [paths["purelib"], paths["platlib"]],
                  "tzpath": (sysconfig.get_config_var("TZPATH") or "").split(":")}))
"""
# `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` or, for the loader, `/lib64/ld-linux-x86-64.so.2 (0x...)`
_LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)\s*$", re.MULTILINE)
_PROBE_TIMEOUT_S = 60


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot create its namespaces here; the message says what to install or allow."""


def bwrap_argv(cfg: SandboxConfig) -> list[str]:
    """The bwrap command line up to the program it runs (which follows it: `sandbox_python(cfg)` and its
    arguments, `-I -S` among them: site-packages are not the snippets' business)."""
    python = sandbox_python(cfg)
    scratch = str(cfg.scratch_mb << 20)
    argv = [shutil.which(cfg.bwrap_path) or cfg.bwrap_path, *sandbox_layout(python, tuple(cfg.packages))]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", scratch, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--size", scratch, "--tmpfs", "/tmp", "--size", scratch, "--tmpfs", WORK_DIR, "--chdir", WORK_DIR]
    argv += ["--remount-ro", "/"]  # last: bwrap's own root, where it made the folders above, is read-only too
    argv += ["--unshare-all", "--unshare-user", "--disable-userns", "--uid", str(SANDBOX_UID), "--gid"]
    argv += [str(SANDBOX_UID), "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    argv += ["--setenv", "PATH", os.path.dirname(python), "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"]
    return argv


@functools.lru_cache(maxsize=8)
def sandbox_layout(python: str, packages: tuple[str, ...] = ()) -> tuple[str, ...]:
    """bwrap's options that show `python` and nothing else of the host: read-only binds of its executable, the
    entries of its sys.path under -I -S (the standard library, its extension modules), its time zone data, the
    shared libraries these link (ldd) and _SYSTEM_FILES, each at its own path with the symlinks on the way; an
    empty cover over its site-packages where they lie inside a folder shown; each of `packages` under
    PACKAGES_DIR, with the libraries its extension modules link."""
    info = _interpreter_info(python)
    shown = [python, *info["path"], *info["tzpath"], *_SYSTEM_FILES]
    shown = [p for p in shown if p and os.path.isabs(p) and os.path.exists(p)]
    extensions = [so for folder in info["path"] if os.path.isdir(folder) for so in glob.glob(f"{folder}/*.so")]
    libraries = _linked_libraries([python, *extensions])
    package_binds, package_libraries = _package_binds(packages)
    binds, links = _resolved([*shown, *libraries, *package_libraries])
    argv: list[str] = []
    for path in binds:
        argv += ["--ro-bind", path, path]
    for link, target in links.items():
        argv += ["--symlink", target, link]
    for site in sorted({os.path.realpath(s) for s in info["site"] if s}):
        if os.path.isdir(site) and any(_within(site, b) and site != b for b in binds):
            argv += ["--size", "4096", "--tmpfs", site, "--remount-ro", site]
    for source, dest in package_binds:
        argv += ["--ro-bind", source, dest]
    return tuple(argv)


@functools.lru_cache(maxsize=8)
def _interpreter_info(python: str) -> dict:
    try:
        done = subprocess.run([python, "-I", "-S", "-c", _QUERY], capture_output=True, timeout=_PROBE_TIMEOUT_S)
        if done.returncode != 0:
            raise OSError(done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}")
        return json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as err:
        raise SandboxUnavailable(f"eval.sandbox.python {python} could not describe its own files: {err}") from err


def _linked_libraries(files: list[str]) -> list[str]:
    """The shared libraries `files` (executables, extension modules) link, as the loader finds them here; with
    libgcc_s beside libc when it is there (glibc opens it itself, to unwind a thread that exits)."""
    if not files:
        return []
    ldd = shutil.which("ldd") or "/usr/bin/ldd"
    try:
        done = subprocess.run([ldd, *files], capture_output=True, timeout=_PROBE_TIMEOUT_S, env={"LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as err:  # ldd is part of the C library's tools (libc-bin)
        raise SandboxUnavailable(f"ldd could not list the libraries of {files[0]}: {err}") from err
    found = sorted(set(_LDD_LINE.findall(done.stdout.decode(errors="replace"))))
    for lib in list(found):
        if os.path.basename(lib) == "libc.so.6":
            found.append(os.path.join(os.path.dirname(lib), "libgcc_s.so.1"))
    return [lib for lib in found if os.path.exists(lib)]


def _package_binds(packages: tuple[str, ...]) -> tuple[list[tuple[str, str]], list[str]]:
    """(source, destination) binds that show each package's own folder (or single module file) under
    PACKAGES_DIR, with any `*.libs` folder beside it that its extension modules link (a wheel's own libraries), and
    the other shared libraries they link (shown at their own paths)."""
    binds: dict[str, str] = {}
    libraries: list[str] = []
    for name in packages:
        try:
            spec = importlib.util.find_spec(name)  # a top-level name: found, not imported
        except (ImportError, ValueError) as err:
            raise SandboxUnavailable(f"eval.sandbox.packages: {name!r} cannot be found here ({err})") from err
        if spec is None or spec.origin in (None, "built-in", "frozen"):
            why = "is not installed" if spec is None else "is not a package with a folder or file of its own"
            raise SandboxUnavailable(
                f"eval.sandbox.packages: {name!r} {why} in this environment ({sys.prefix}); install it there or "
                "remove it from the list"
            )
        locations = list(spec.submodule_search_locations or [])
        own = os.path.realpath(locations[0] if locations else spec.origin)
        site = os.path.dirname(own)
        binds[own] = f"{PACKAGES_DIR}/{os.path.basename(own)}"
        extensions = [own] if not locations else glob.glob(f"{own}/**/*.so*", recursive=True)
        for lib in _linked_libraries([e for e in extensions if os.path.isfile(e)]):
            real = os.path.realpath(lib)
            if _within(real, site):  # a folder of the wheel's own libraries (numpy.libs), beside the package
                top = os.path.join(site, os.path.relpath(real, site).split(os.sep)[0])
                binds[top] = f"{PACKAGES_DIR}/{os.path.basename(top)}"
            else:
                libraries.append(lib)
    return sorted(binds.items()), libraries


def _resolved(paths: list[str]) -> tuple[list[str], dict[str, str]]:
    """The real paths to bind for `paths`, none inside another, and the symlinks met on the way to them ({link:
    target}, those inside a bound folder left out: the bind shows them already)."""
    links: dict[str, str] = {}
    real = sorted({_resolve(p, links) for p in paths})
    binds = [p for p in real if not any(p != q and _within(p, q) for q in real)]
    kept = {k: v for k, v in sorted(links.items()) if not any(_within(k, b) for b in binds)}
    return binds, kept


def _resolve(path: str, links: dict[str, str], depth: int = 0) -> str:
    """`path` with every symlink resolved, as os.path.realpath, recording each link met in `links`."""
    if depth > 40:
        raise SandboxUnavailable(f"too many levels of symbolic links at {path}")
    current = "/"
    for part in Path(os.path.normpath(path)).parts[1:]:
        step = os.path.join(current, part)
        if os.path.islink(step):
            target = os.readlink(step)
            links[step] = target
            step = _resolve(os.path.normpath(os.path.join(current, target)), links, depth + 1)
        current = step
    return current


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
            raise SandboxUnavailable(f"eval.sandbox.python {cfg.python!r} is not an executable file")
        return os.path.realpath(found)
    own = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    if not drops_to_nobody() or _world_executable(own):
        return own
    for candidate in ("/usr/local/bin/python3", "/usr/bin/python3"):
        if os.path.exists(candidate) and _world_executable(os.path.realpath(candidate)):
            return os.path.realpath(candidate)
    raise SandboxUnavailable(
        f"no Python the sandbox's user (uid {SANDBOX_UID}) can run: {own} is not readable by others and there is no "
        "/usr/bin/python3; install python3 (apt-get install python3) or set eval.sandbox.python"
    )


def _world_executable(path: str) -> bool:
    """Whether any user may run `path`: every folder above it searchable by others, the file readable and
    executable by others."""
    file = Path(path)
    folders_ok = all(os.stat(p).st_mode & stat.S_IXOTH for p in file.parents)
    mode = os.stat(file).st_mode
    return folders_ok and bool(mode & stat.S_IROTH) and bool(mode & stat.S_IXOTH)


def require_bubblewrap(cfg: SandboxConfig | None = None) -> None:
    """Raise SandboxUnavailable, naming the package to install (or the field to fix), unless bwrap exists and can
    start a sandbox with cfg's interpreter here; a probe that passed is not run again for the same command line."""
    cfg = cfg or SandboxConfig()
    if not shutil.which(cfg.bwrap_path):
        installed = shutil.which("bwrap")
        if cfg.bwrap_path != "bwrap" and installed:
            raise SandboxUnavailable(
                f"eval.sandbox.bwrap_path {cfg.bwrap_path!r} is not an executable file; bubblewrap is installed at "
                f"{installed}: set the field to that path, or remove it to use bwrap from PATH"
            )
        where = "on PATH" if cfg.bwrap_path == "bwrap" else "(eval.sandbox.bwrap_path): no such executable"
        raise SandboxUnavailable(f"bubblewrap not found ({cfg.bwrap_path!r} {where}): {INSTALL_HINT}")
    _probe((*bwrap_argv(cfg), sandbox_python(cfg), "-I", "-S", "-c", "pass"))


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
            f"container allowed to unshare); {INSTALL_HINT}. eval.sandbox.kind: none runs code without isolation."
        )
