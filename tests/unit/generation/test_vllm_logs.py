"""vLLM logs to stdout unless told otherwise; a command's stdout ends with its JSON line, so the engine moves vLLM's
console handler to stderr, and leaves a stream the user chose with VLLM_LOGGING_STREAM alone.

The tests hold the handlers they install by identity: in a test worker that imported vLLM for an earlier test, the
vllm logger can gain a handler of vLLM's own between the fixture and the test's first line."""

import logging
import sys
from types import SimpleNamespace

import pytest

from essaflow.generation.vllm_engine import _vllm_logs_to_stderr


@pytest.fixture
def vllm_logger():
    logger = logging.getLogger("vllm")
    saved = logger.handlers[:]
    console, to_file = logging.StreamHandler(sys.stdout), logging.FileHandler("/dev/null")
    logger.handlers = [console, to_file]
    yield SimpleNamespace(logger=logger, console=console, to_file=to_file)
    for h in logger.handlers:
        if h not in saved:
            h.close()
    logger.handlers = saved


def test_the_console_handler_moves_to_stderr_and_a_file_handler_stays(vllm_logger, monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    _vllm_logs_to_stderr()
    handlers = vllm_logger.logger.handlers
    assert vllm_logger.console in handlers and vllm_logger.console.stream is sys.stderr
    assert vllm_logger.to_file in handlers and vllm_logger.to_file.baseFilename == "/dev/null"


def test_a_stream_the_user_chose_stays(vllm_logger, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stdout")
    _vllm_logs_to_stderr()
    assert vllm_logger.console.stream is sys.stdout


def test_stderr_is_what_it_writes_to(vllm_logger, monkeypatch, capsys):
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    vllm_logger.console.setStream(sys.stdout)
    _vllm_logs_to_stderr()
    vllm_logger.logger.warning("engine line")
    out, err = capsys.readouterr()
    assert "engine line" not in out and "engine line" in err
