"""vLLM logs to stdout unless told otherwise; a command's stdout ends with its JSON line, so the engine moves vLLM's
console handler to stderr, and leaves a stream the user chose with VLLM_LOGGING_STREAM alone."""

import logging
import sys

import pytest

from essaflow.generation.vllm_engine import _vllm_logs_to_stderr


@pytest.fixture
def vllm_logger():
    logger = logging.getLogger("vllm")
    saved = logger.handlers[:]
    logger.handlers = [logging.StreamHandler(sys.stdout), logging.FileHandler("/dev/null")]
    yield logger
    for h in logger.handlers:
        h.close()
    logger.handlers = saved


def test_the_console_handler_moves_to_stderr_and_a_file_handler_stays(vllm_logger, monkeypatch):
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    console, to_file = vllm_logger.handlers
    _vllm_logs_to_stderr()
    # the handlers it was given, by identity: another test's vLLM engine in this process may have added its own
    assert console in vllm_logger.handlers and console.stream is sys.stderr
    assert to_file in vllm_logger.handlers and to_file.baseFilename == "/dev/null"


def test_a_stream_the_user_chose_stays(vllm_logger, monkeypatch):
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "ext://sys.stdout")
    chosen = vllm_logger.handlers[0].stream
    _vllm_logs_to_stderr()
    assert vllm_logger.handlers[0].stream is chosen


def test_stderr_is_what_it_writes_to(vllm_logger, monkeypatch, capsys):
    monkeypatch.delenv("VLLM_LOGGING_STREAM", raising=False)
    vllm_logger.handlers[0].setStream(sys.stdout)
    _vllm_logs_to_stderr()
    vllm_logger.warning("engine line")
    out, err = capsys.readouterr()
    assert "engine line" not in out and "engine line" in err
