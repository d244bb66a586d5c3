"""A reward of your own cannot take the process down: it runs in reward processes of its own (essaflow/judging/
reward_pool.py), real ones here. `os._exit`, `sys.exit`, a sleep forever (in a call or at import), a
`KeyboardInterrupt`, an output flood, `inf`, `nan` or a 2-million-item list each give one clear error naming the
reward, within the deadline; this process survives, the next call scores, and no process is left behind.
check-config says the same as one `error:` line within the reward's deadline (not 20 rows x the deadline)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import psutil
import pytest

from essaflow.data.schema import Problem
from essaflow.judging.judge import Judge, RewardError
from essaflow.judging.reward_pool import close_pools
from essaflow.judging.reward_ref import RewardRefError
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
P = [Problem(id=f"p{i}", prompt=f"{i}+1=", answer=str(i + 1), fields={"n": i}) for i in range(6)]
RIGHT = [p.answer for p in P]
BAD = """
    import math, os, sys, time

    def exits(completion, problem):
        os._exit(0)

    def sys_exits(completion, reference):
        sys.exit(3)

    def sleeps(completion, reference):
        time.sleep(3600)

    def interrupts(completion, reference):
        raise KeyboardInterrupt

    def floods(completion, reference):
        while True:
            print("x" * 1000)

    def infinite(completion, reference):
        return math.inf

    def not_a_number(completion, problem):
        return {"value": float("nan")}

    def huge_list(completion, reference):
        return list(range(2_000_000))

    def starts_a_child_then(completion, reference):
        import subprocess
        subprocess.Popen(["sleep", "3600"], env={"ESSAFLOW_TEST_MARK": completion})
        if reference == "1":
            os._exit(0)
        time.sleep(3600)

    def exits_on_p1(completion, problem):
        if problem.id == "p1":
            os._exit(1)
        return float(completion == problem.answer)
"""
#: (function, RewardError kind, words the error holds)
CASES = {
    "exits": ("ended", "the reward's process ended (exit status 0)"),
    "sys_exits": ("exit", "the reward called sys.exit(3)"),
    "sleeps": ("timeout", "no result within eval.reward_timeout_s=1 s"),
    "interrupts": ("exit", "KeyboardInterrupt: raised in the reward"),
    "floods": ("output", "printed more than 1,000,000 characters in one call"),
    "infinite": ("value", "returned inf: a reward returns a number or a mapping of named numbers, each finite"),
    "not_a_number": ("value", "returned {'value': nan}"),
    "huge_list": ("value", "returned [0, 1, 2, 3, 4, 5, 6, 7, ...]"),
}


def reward_file(tmp_path: Path, body: str = BAD, name: str = "bad_reward.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def reward_processes() -> list[psutil.Process]:
    """This process's reward processes still alive (zombies count: they were not reaped)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "essaflow.judging.reward_worker" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.NoSuchProcess:
            continue
        except psutil.ZombieProcess:
            out.append(child)
    return out


@pytest.fixture(autouse=True)
def _no_process_left():
    close_pools()
    yield
    close_pools()
    assert reward_processes() == []


@pytest.mark.parametrize("function", sorted(CASES))
def test_a_misbehaving_reward_is_one_clear_error_and_this_process_goes_on(tmp_path, function):
    kind, words = CASES[function]
    path = reward_file(tmp_path)
    judge = Judge(f"{path}:{function}", timeout_s=1.0)
    start = time.monotonic()
    with pytest.raises(RewardError) as err:
        judge.score(RIGHT, P)
    took = time.monotonic() - start
    message = str(err.value)
    assert err.value.kind == kind, message
    assert f"reward '{path}:{function}' failed on problem 'p0'" in message and words in message, message
    assert len(message) < 700, message  # a 2-million-item list is not spelled out
    assert took < 8, took  # the first call's failure stops the batch (eval.reward_errors: fail)
    assert len(reward_processes()) <= 2  # the pool's own processes at most: a hung or ended one was reaped
    # the same process judges the next reward at once
    good = reward_file(
        tmp_path, "def right(completion, reference):\n    return float(completion == reference)\n", "a.py"
    )
    assert Judge(f"{good}:right").score(RIGHT, P).rewards == [1.0] * len(P)


def test_a_call_that_ends_its_process_costs_that_call_alone(tmp_path):
    judge = Judge(f"{reward_file(tmp_path)}:exits_on_p1", errors="zero", timeout_s=5.0)
    scores = judge.score(RIGHT, P)
    assert scores.rewards == [1.0, 0.0, 1.0, 1.0, 1.0, 1.0] and scores.errors == 1
    assert judge.score(RIGHT[:1], P[:1]).rewards == [1.0]  # a fresh process took over


def test_under_reward_errors_zero_a_reward_that_always_hangs_is_stopped_after_three_timeouts(tmp_path):
    judge = Judge(f"{reward_file(tmp_path)}:sleeps", errors="zero", timeout_s=0.5)
    start = time.monotonic()
    with pytest.raises(RewardError, match=r"3 calls in a row timed out or ended the reward's process") as err:
        judge.score(RIGHT * 10, P * 10)  # 60 completions: not 60 timeouts
    assert err.value.kind == "timeout"
    assert time.monotonic() - start < 10
    exits = Judge(f"{reward_file(tmp_path)}:exits", errors="zero", timeout_s=5.0)
    with pytest.raises(RewardError, match=r"3 calls in a row .*\(exit status 0\)"):
        exits.score(RIGHT * 10, P * 10)


def test_a_large_batch_of_a_slow_reward_is_shared_and_scored_in_order(tmp_path):
    body = """
        import time

        def graded(completion, problem):
            time.sleep(0.001)  # slow enough for a second process to pay
            return {"n": problem.fields["n"], "right": float(completion == problem.answer)}
    """
    judge = Judge(f"{reward_file(tmp_path, body, 'graded.py')}:graded")
    problems = [P[i % len(P)] for i in range(500)]
    completions = [p.answer if i % 3 else "no" for i, p in enumerate(problems)]
    scores = judge.score(completions, problems)
    assert scores.components["n"] == [float(p.fields["n"]) for p in problems]
    assert scores.components["right"] == [float(i % 3 != 0) for i in range(500)]
    assert len(reward_processes()) == 2  # the second process took a share once the first request showed 1 ms calls


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("import time\ntime.sleep(3600)\n", "took longer than 1 s"),
        ("import os\nos._exit(0)\n", "ended the reward's process (exit status 0)"),
        ("import sys\nsys.exit(2)\n", "raised SystemExit: 2"),
    ],
    ids=["sleep", "os-exit", "sys-exit"],
)
def test_a_reward_file_that_misbehaves_at_import_is_one_error_within_the_deadline(tmp_path, body, words):
    path = reward_file(tmp_path, body + "def r(completion, problem):\n    return 1.0\n", "at_import.py")
    start = time.monotonic()
    with pytest.raises(RewardRefError, match=f"eval.reward '{path}:r': importing {path} ") as err:
        Judge(f"{path}:r", timeout_s=1.0)
    assert words in str(err.value)
    assert time.monotonic() - start < 8


def test_what_a_reward_prints_reaches_stderr_capped(tmp_path, capfd):
    body = "def talk(completion, reference):\n    print('checking', completion)\n    return 1.0\n"
    Judge(f"{reward_file(tmp_path, body, 'talk.py')}:talk").score(RIGHT[:2], P[:2])
    err = capfd.readouterr().err
    assert "checking 1\n" in err and "checking 2\n" in err
    scores = Judge(f"{reward_file(tmp_path)}:floods", errors="zero").score(RIGHT, P)
    assert scores.errors == len(P)
    flood = capfd.readouterr().err  # the first 2,000 characters, and a count of the rest
    assert len(flood) < 2100 and flood.rstrip().endswith("more characters not shown]"), flood[-200:]


@pytest.mark.parametrize("answer", ["1", "2"], ids=["then-exits", "then-hangs"])
def test_what_a_reward_started_ends_with_its_call(tmp_path, answer):
    marker = uuid.uuid4().hex
    judge = Judge(f"{reward_file(tmp_path)}:starts_a_child_then", timeout_s=1.0)
    with pytest.raises(RewardError, match="process ended" if answer == "1" else "no result within"):
        judge.score([marker], [Problem(id="c", prompt="p", answer=answer)])
    # the `sleep` it started went with its process's session
    wait_until(lambda: marked(marker) == [], 5, "the process the reward started to end with it", every=0.1)


def test_reward_processes_end_with_a_parent_killed_mid_call(tmp_path):
    marker = uuid.uuid4().hex
    script = textwrap.dedent(f"""
        from essaflow.data.schema import Problem
        from essaflow.judging.judge import Judge
        judge = Judge({str(reward_file(tmp_path))!r} + ":sleeps", timeout_s=600)
        print("scoring", flush=True)
        judge.score(["1"], [Problem(id="a", prompt="p", answer="1")])
    """)
    env = {**os.environ, "ESSAFLOW_TEST_MARK": marker}
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "scoring"
        # the parent and its reward process, asleep in the call (it starts just after the parent prints)
        wait_until(lambda: len(marked(marker)) == 2, 60, "the parent's reward process to start", every=0.1)
    finally:
        parent.kill()  # no atexit runs: the reward process must notice on its own
        parent.wait()
        parent.stdout.close()
    wait_until(lambda: marked(marker) == [], 10, "the reward process to end after its parent", every=0.2)


# ------------------------------------------------------------------------------------------ check-config


def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(f'{{"id": "r{i}", "prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(40)))
    return path


def check_config(tmp_path: Path, reward: str, marker: str) -> tuple[subprocess.CompletedProcess, float]:
    words = ["data.source=file", f"data.path={data_file(tmp_path)}", "data.eval_size=4", f"eval.reward={reward}",
             f"eval.reward_timeout_s={DEADLINE_S}"]  # fmt: skip
    env = {**os.environ, "ESSAFLOW_TEST_MARK": marker}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "cli.main", "check-config", *(w for s in words for w in ("--set", s))],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    return proc, time.monotonic() - start


def marked(marker: str) -> list[int]:
    """Processes whose environment holds `marker` (what a command started and left behind)."""
    found = []
    for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
        try:
            if f"ESSAFLOW_TEST_MARK={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


DEADLINE_S = 5
SLEEPS_AT_IMPORT = "import time\ntime.sleep(3600)\n\ndef r(completion, reference):\n    return 1.0\n"


@pytest.mark.parametrize(
    ("function", "words"),
    [
        ("exits", "the reward's process ended (exit status 0)"),
        ("sys_exits", "the reward called sys.exit(3)"),
        ("sleeps", f"no result within eval.reward_timeout_s={DEADLINE_S} s"),
        ("infinite", "returned inf"),
        ("interrupts", "KeyboardInterrupt: raised in the reward"),
        ("r", f"took longer than {DEADLINE_S} s"),  # a sleep at the file's top level
    ],
)
def test_check_config_gives_one_error_within_the_rewards_deadline(tmp_path, function, words):
    path = reward_file(tmp_path, *((SLEEPS_AT_IMPORT, "at_import.py") if function == "r" else (BAD,)))
    marker = uuid.uuid4().hex
    proc, took = check_config(tmp_path, f"{path}:{function}", marker)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr[-3000:]
    assert f"{path}" in errors[0] and words in errors[0], errors[0]
    if function != "r":
        assert "no score for row 0 (id 'r0')" in errors[0], errors[0]
    assert "Traceback" not in proc.stderr
    # the command's start (a few seconds on a busy machine) plus one deadline: not 20 rows x 5 s
    assert took < 4 * DEADLINE_S, took
    assert marked(marker) == []
