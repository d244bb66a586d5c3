"""tests/unit start no process and no server: each unit test's setup, call and teardown (its fixtures' too) run with
Python's ways of starting one refused, so a test that needs a process says so at once and moves to tests/integration.

Refused: subprocess (and so `git`, bubblewrap, a reward's own process, `ray.init`), multiprocessing, os.fork and
posix_spawn, and a listening socket. Let through: the standard library's `platform` asking `file` or `uname` about
this machine (prefect's vendored croniter calls platform.architecture() when it is imported). The source commit the
MLflow tags record comes from ESSAFLOW_GIT_COMMIT here, not from `git rev-parse` (essaflow.tracking.git_commit)."""

from __future__ import annotations

import multiprocessing.process
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Generator

import pytest

_OS_STARTS = ("fork", "forkpty", "posix_spawn", "posix_spawnp")


class StartsAProcess(AssertionError):
    """A unit test started (or tried to start) a process or a server."""


def _asked_by_platform() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == platform.__file__:
            return True
        frame = frame.f_back
    return False


def _refuse(seen: list[str], what: str, original):
    def refused(*args, **kwargs):
        if _asked_by_platform():
            return original(*args, **kwargs)
        seen.append(what)
        raise StartsAProcess(f"a unit test {what}: it belongs in tests/integration (tests/unit/conftest.py)")

    return refused


def _guarded() -> Generator[None, object, object]:
    seen: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ESSAFLOW_GIT_COMMIT", "unit-test")
        for owner, name, what in (
            (subprocess.Popen, "_execute_child", "starts a process (subprocess)"),
            (multiprocessing.process.BaseProcess, "start", "starts a process (multiprocessing)"),
            *((os, name, f"starts a process (os.{name})") for name in _OS_STARTS if hasattr(os, name)),
            (socket.socket, "listen", "starts a server (a listening socket)"),
        ):
            mp.setattr(owner, name, _refuse(seen, what, getattr(owner, name)))
        result = yield
    if seen:  # refused even where the code under test caught the error and went on
        raise StartsAProcess(f"a unit test {seen[0]}: it belongs in tests/integration (tests/unit/conftest.py)")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarded())
