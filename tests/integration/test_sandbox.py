"""The sandbox on real bubblewrap, no mocks: every hostile snippet scores 0, is contained, and the pool goes on
scoring an honest solution 1 (the same pool, before and after each); a snippet sees the interpreter's files and
nothing else of the host (no project, store or MLflow database, wherever they live); the packages named are
importable and no other; the timeout holds; a missing bwrap names the package; kind none runs without isolation.
Processes: the sandbox's workers; what needs none (extracting the program, the protocol, the config's refusals, a
bwrap_path that is no file) is in tests/unit/sandbox/test_sandbox.py."""

import json
import os
import shutil
import socket
import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from essaflow.sandbox import (
    SandboxConfig,
    SandboxPool,
    SandboxUnavailable,
    VerdictMemo,
    code_tests_scores,
    extract_program,
    require_bubblewrap,
    shared_pool,
)
from essaflow.sandbox.bubblewrap import PACKAGES_DIR, WORK_DIR, sandbox_layout, sandbox_python

pytestmark = pytest.mark.integration
TIMEOUT_S = 2.0
SLACK_S = 1.5  # the kill, the reaping and a loaded 2-core machine
PROGRAM = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(2, 2) == 4\n"
HONEST = PROGRAM + TESTS
SECRET_VAR = "ESSAFLOW_SANDBOX_TEST_SECRET"
FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
LEAVE_BEHIND = (
    "import os, time\nopen('/tmp/left', 'w').write('x')\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n"
)

#: snippets that try to break out or wear the pool down (run before an honest solution): name, code, statuses
HOSTILE = [
    ("infinite loop", "while True:\n    pass\n", {"timeout"}),
    ("memory bomb", "hoard = []\nwhile True:\n    hoard.append(bytearray(32 << 20))\n", {"failed", "crashed"}),
    ("fork bomb", FORK_BOMB, {"timeout"}),
    ("kill the worker", "import os\nos.kill(os.getppid(), 9)\n", {"error"}),
    ("stop the worker", "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\n", {"error"}),
    ("200 MB of output", "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * (1 << 20))\n", {"failed"}),
    ("segfault", "import ctypes\nctypes.string_at(0)\n", {"crashed"}),
]


@pytest.fixture(scope="module")
def outside():
    """A folder on the host outside /tmp (the sandbox has a /tmp of its own): /var/tmp, writable by every user."""
    root = Path("/var/tmp") / f"essaflow-sandbox-test-{uuid.uuid4().hex}"
    root.mkdir(mode=0o755)
    yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def secrets_on_host(outside):
    """A secret in the environment and a world-readable ~/.aws/credentials under a $HOME outside /tmp, both set
    before the pool starts; what each holds is the secret."""
    secret = uuid.uuid4().hex
    home = outside / "home"
    (home / ".aws").mkdir(parents=True, mode=0o755)
    (home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {secret}\n")
    (home / ".aws" / "credentials").chmod(0o644)
    saved = {k: os.environ.get(k) for k in ("HOME", SECRET_VAR)}
    os.environ.update(HOME=str(home), **{SECRET_VAR: secret})
    yield secret, home
    for key, value in saved.items():
        if value is None:
            del os.environ[key]
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def pool(secrets_on_host):
    with SandboxPool(SandboxConfig(workers=2, timeout_s=TIMEOUT_S, memory_mb=256)) as p:
        assert_healthy(p)
        yield p


def assert_healthy(pool):
    """An honest solution scores 1 on every worker (a batch as large as the pool)."""
    outcomes = pool.run([HONEST] * pool.cfg.workers)
    assert all(o.ok and o.status == "passed" for o in outcomes), outcomes


def run_one(pool, code):
    outcome = pool.run([code])[0]
    assert not outcome.ok
    assert_healthy(pool)
    return outcome


def test_code_tests_scores_an_honest_and_a_wrong_program(pool):
    completions = [f"Here:\n```python\n{PROGRAM}```", "```python\ndef add(a, b):\n    return a - b\n```"]
    assert code_tests_scores(completions, [TESTS, TESTS], pool) == [1.0, 0.0]
    with pytest.raises(ValueError):
        code_tests_scores(completions, [TESTS], pool)


def test_a_snippet_already_judged_is_not_run_again_and_one_edited_is(pool, monkeypatch):
    ran: list[str] = []
    run = pool.run
    monkeypatch.setattr(pool, "run", lambda snippets: ran.extend(snippets) or run(snippets))
    honest, wrong = f"```python\n{PROGRAM}```", "```python\ndef add(a, b):\n    return a - b\n```"
    memo = VerdictMemo(16)
    assert code_tests_scores([honest, wrong, honest], [TESTS] * 3, pool, memo) == [1.0, 0.0, 1.0]
    assert len(ran) == 2  # each distinct snippet once within the batch
    assert code_tests_scores([wrong, honest], [TESTS] * 2, pool, memo) == [0.0, 1.0]
    assert len(ran) == 2 and memo.hits == 2  # both from memory
    edited = TESTS + "assert add(0, 0) == 1\n"  # other bytes: run, and judged on their own
    assert code_tests_scores([honest], [edited], pool, memo) == [0.0]
    assert len(ran) == 3
    assert code_tests_scores([honest], [TESTS], pool, VerdictMemo(0)) == [1.0] and len(ran) == 4  # 0: no memory


@pytest.mark.parametrize("exit_call", ["import os\nos._exit(0)", "import sys\nsys.exit(0)"])
def test_an_exit_before_the_tests_scores_zero(pool, exit_call):
    completion = f"```python\n{PROGRAM}{exit_call}\n```"
    assert code_tests_scores([completion], ["assert add(1, 2) == 4"], pool) == [0.0]
    assert_healthy(pool)


def test_no_connection_to_the_hosts_loopback(pool):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
        outcome = run_one(pool, code)
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    assert "ConnectionRefusedError" in outcome.output or "OSError" in outcome.output, outcome.output


def test_no_write_outside_the_sandbox(pool, outside, tmp_path):
    targets = [tmp_path / "escaped.txt", outside / "escaped.txt", Path(__file__).with_name(f"escaped-{uuid.uuid4()}")]
    code = "".join(f"open({str(t)!r}, 'w').write('out')\n" for t in targets[::-1])
    try:
        outcome = run_one(pool, code)
        # read-only, or not there at all when the checkout lives under a folder the sandbox replaces (/tmp, /home)
        refused = ("Read-only file system", "No such file or directory")
        assert outcome.status == "failed" and any(r in outcome.output for r in refused), outcome
        for path in targets[:-1]:  # the last goes to the sandbox's own /tmp: a file the host never sees
            code = f"open({str(path)!r}, 'w').write('out')\n"
            assert run_one(pool, code).status == "failed"
        assert not any(t.exists() for t in targets)
    finally:
        for t in targets:
            t.unlink(missing_ok=True)


def test_the_hosts_environment_and_home_are_out_of_reach(pool, secrets_on_host):
    secret, home = secrets_on_host
    code = f"""import glob, os
print(dict(os.environ))
found = [v for v in os.environ.values() if {secret!r} in v]
for path in glob.glob('/proc/*/environ') + [{str(home / ".aws" / "credentials")!r}, '/root/.aws/credentials']:
    try:
        found += [path] if {secret!r}.encode() in open(path, 'rb').read() else []
    except OSError as err:
        print(path, err)
assert found, 'no secret reachable'
"""
    outcome = run_one(pool, code)
    assert outcome.status == "failed" and "no secret reachable" in outcome.output, outcome
    assert secret not in outcome.output
    assert "'PATH'" in outcome.output and SECRET_VAR not in outcome.output
    unreadable = run_one(pool, "print(open('/etc/shadow').read())")  # root's own files: not root in there
    assert "PermissionError" in unreadable.output or "No such file" in unreadable.output


def test_the_worker_pipes_to_the_host_are_out_of_reach(pool):
    """A snippet runs as the worker's uid; the worker is non-dumpable, so its fds (the answers the host reads)
    cannot be opened through /proc."""
    code = """import os
reached = []
for name in os.listdir(f'/proc/{os.getppid()}/fd'):
    try:
        open(f'/proc/{os.getppid()}/fd/{name}', 'wb').close()
        reached.append(name)
    except OSError:
        pass
assert reached
"""
    assert run_one(pool, code).status == "failed"


@pytest.mark.parametrize(("name", "code", "statuses"), HOSTILE, ids=[case[0] for case in HOSTILE])
def test_a_hostile_snippet_scores_zero_and_the_pool_goes_on(pool, name, code, statuses):
    outcome = run_one(pool, code + HONEST)
    assert outcome.status in statuses, outcome
    assert len(outcome.output) < pool.cfg.output_bytes + 200
    if name == "infinite loop":
        assert outcome.wall_s < TIMEOUT_S + SLACK_S


def test_nothing_a_snippet_leaves_behind_reaches_the_next(pool):
    """A daemon in a session of its own and a file in /tmp: a batch as large as the pool runs on every worker."""
    assert all(o.ok for o in pool.run([LEAVE_BEHIND] * pool.cfg.workers))
    # in the sandbox's pid namespace: its init, the worker and this snippet, nothing else
    find = "import os\nassert os.path.exists('/tmp/left') or len([p for p in os.listdir('/proc') if p.isdigit()]) > 3\n"
    assert not any(o.ok for o in pool.run([find] * pool.cfg.workers))


def test_run_is_thread_safe_and_keeps_the_order(pool):
    batches = [[HONEST, "assert False\n", f"print({i})\n"] for i in range(4)]
    with ThreadPoolExecutor(len(batches)) as threads:
        results = list(threads.map(pool.run, batches))
    assert [[o.status for o in r] for r in results] == [["passed", "failed", "passed"]] * len(batches)
    assert [r[2].output for r in results] == [f"{i}\n" for i in range(len(batches))]


def test_the_timeout_is_honoured(pool):
    start = time.monotonic()
    outcome = pool.run(["import time\ntime.sleep(60)\n"])[0]
    assert outcome.status == "timeout" and not outcome.ok
    assert TIMEOUT_S <= time.monotonic() - start < TIMEOUT_S + SLACK_S


def test_a_missing_bubblewrap_names_the_package(monkeypatch, tmp_path):
    for cfg in (SandboxConfig(bwrap_path=str(tmp_path / "bwrap")), SandboxConfig()):
        monkeypatch.setenv("PATH", str(tmp_path))  # the second: bwrap by name, on a PATH without it
        with pytest.raises(SandboxUnavailable, match="bubblewrap") as raised:
            SandboxPool(cfg)
        assert "`bubblewrap`" in str(raised.value) and "make install" in str(raised.value)
    monkeypatch.undo()
    require_bubblewrap()  # the real one, found again


def test_kind_none_runs_without_isolation_but_with_the_limits(tmp_path):
    marker = tmp_path / "written-by-the-snippet"
    with SandboxPool(SandboxConfig(kind="none", workers=1, timeout_s=1.0)) as pool:
        outcomes = pool.run([HONEST, f"open({str(marker)!r}, 'w').write('x')\n", "import os\nos._exit(0)\n"])
        assert [o.status for o in outcomes] == ["passed", "passed", "failed"]
        assert marker.read_text() == "x"  # the host's filesystem, as it is
        assert pool.run(["import time\ntime.sleep(30)\n"])[0].status == "timeout"


def test_shared_pool_is_one_per_config():
    cfg = SandboxConfig(kind="none", workers=1)
    first = shared_pool(cfg)
    try:
        assert shared_pool(cfg.model_copy()) is first
        assert first.run([HONEST])[0].ok
    finally:
        first.close()
    assert shared_pool(cfg) is not first  # a closed pool is replaced
    shared_pool(cfg).close()


@pytest.fixture(scope="module")
def project(outside):
    """A user's project outside /tmp and $HOME, every file world-readable, each holding a secret: a data file in
    the checkout, a dataset's held-out answers in the artifact store and the MLflow database (sqlite)."""
    root = outside / "project"
    files = {
        "data": root / "data" / "train.jsonl",
        "store": root / ".essaflow" / "store" / "datasets" / "heldout.jsonl",
        "mlflow": root / "mlflow.db",
    }
    secret = uuid.uuid4().hex
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
    for name in ("data", "store"):
        files[name].write_text(json.dumps({"prompt": "add 1 and 2", "answer": secret}) + "\n")
    with sqlite3.connect(files["mlflow"]) as db:
        db.execute("create table params (key text, value text)")
        db.execute("insert into params values ('heldout_answer', ?)", (secret,))
    db.close()
    for folder, _, names in os.walk(root):
        os.chmod(folder, 0o755)
        for name in names:
            os.chmod(os.path.join(folder, name), 0o644)
    real = os.path.realpath(root)
    assert not real.startswith("/tmp/") and not real.startswith(os.path.realpath(os.path.expanduser("~")) + "/")
    return secret, files


def leak(path: Path, secret: str) -> str:
    """A completion that solves the task, then reads `path` (as a reward hacker reads the held-out answers) and
    passes only when the secret was there to read."""
    if path.suffix == ".db":
        db = f"sqlite3.connect('file:{path}?immutable=1', uri=True)"
        read = f"import sqlite3\nfound = str({db}.execute('select value from params').fetchall())\n"
    else:
        read = f"found = open({str(path)!r}).read()\n"
    return f"```python\n{PROGRAM}{read}assert {secret!r} in found\n```"


def test_a_snippet_cannot_read_the_project_the_store_or_the_mlflow_database(pool, project):
    secret, files = project
    honest = f"```python\n{PROGRAM}```"
    completions = [honest, *(leak(path, secret) for path in files.values())]
    assert code_tests_scores(completions, [TESTS] * len(completions), pool) == [1.0, 0.0, 0.0, 0.0]
    for path in files.values():  # not refused: not there at all
        output = pool.run([extract_program(leak(path, secret)) + TESTS])[0].output
        assert "No such file or directory" in output or "unable to open database" in output, output
    # the same completions, run without isolation on this host, reach every secret: the files are readable
    with SandboxPool(SandboxConfig(kind="none", workers=1)) as unsandboxed:
        assert code_tests_scores(completions, [TESTS] * len(completions), unsandboxed) == [1.0] * len(completions)
    assert_healthy(pool)


def test_the_checkout_and_the_folders_above_a_project_are_not_there(pool, project):
    _, files = project
    paths = [Path(__file__).resolve(), *files.values()]
    own = {f"/{top}" for top in sandbox_tops(pool.cfg)}  # a checkout under /tmp: the sandbox's /tmp is its own
    above = sorted({str(folder) for path in paths for folder in path.parents if str(folder) not in {"/", *own}})
    code = f"import os\nthere = [p for p in {above!r} if os.path.lexists(p)]\nassert not there, there\n"
    outcome = pool.run([code])[0]
    assert outcome.ok, outcome


def sandbox_tops(cfg: SandboxConfig) -> set[str]:
    """The top-level entries the sandbox's own layout makes: what it binds and links for the interpreter (and
    /packages), and the folders bwrap mounts itself."""
    layout = sandbox_layout(sandbox_python(cfg), tuple(cfg.packages))
    dests = [layout[i + 2] for i, arg in enumerate(layout) if arg in ("--ro-bind", "--symlink")]
    return {Path(d).parts[1] for d in dests} | {"dev", "proc", "tmp", WORK_DIR.strip("/")}


def test_listing_root_shows_only_the_sandboxs_own_entries(pool, project):
    listing = pool.run(["import json, os\nprint(json.dumps(sorted(os.listdir('/'))))\n"])[0]
    assert listing.ok, listing
    seen = set(json.loads(listing.output))
    assert seen == sandbox_tops(pool.cfg)
    python = Path(sandbox_python(pool.cfg))
    host_only = {"home", "root", "opt", "srv", "mnt", "var", "work", "run", "boot", "media", "sys"}
    host_only |= {project[1]["data"].resolve().parts[1], Path(__file__).resolve().parts[1]}
    assert not (seen & (host_only - sandbox_tops(pool.cfg))), seen  # a checkout under /tmp: /tmp is the sandbox's
    # every file it can find lies in what the interpreter needs: its own folders, the libraries, /etc's few files
    layout = sandbox_layout(str(python))
    shown = [layout[i + 1] for i, arg in enumerate(layout) if arg == "--ro-bind"]
    code = f"""import os
shown = {shown!r}
stray = []
for top in sorted(os.listdir('/')):
    for folder, dirs, names in os.walk('/' + top):
        if folder in ('/proc', '/dev'):
            dirs[:] = []
            continue
        for name in names:
            path = os.path.realpath(os.path.join(folder, name))
            if os.path.exists(path) and not any(path == s or path.startswith(s + '/') for s in shown):
                stray.append(path)
assert not stray, stray[:20]
"""
    with SandboxPool(SandboxConfig(workers=1, timeout_s=60)) as roomy:  # thousands of files, on a loaded machine
        outcome = roomy.run([code])[0]
    assert outcome.ok, outcome


def test_the_sandboxs_own_root_is_read_only(pool):
    for code in ("open('/left-behind', 'w').write('x')\n", "import os\nos.mkdir('/usr/left-behind')\n"):
        outcome = run_one(pool, code)
        assert outcome.status == "failed" and "Read-only file system" in outcome.output, outcome
    outcome = pool.run(["import os\nopen('notes.txt', 'w').write('x')\nprint(os.getcwd())\n"])[0]
    assert outcome.ok and outcome.output == f"{WORK_DIR}\n", outcome  # the working folder: its own, writable
    assert pool.run(["import os\nassert not os.listdir('.')\n"])[0].ok  # and wiped after each snippet


def test_the_packages_named_are_importable_and_no_other():
    with SandboxPool(SandboxConfig(workers=1, packages=["numpy"])) as pool:
        assert_healthy(pool)
        code = "import json, os, numpy\nassert numpy.linalg.inv(numpy.eye(2))[0, 0] == 1.0\n"
        outcome = pool.run([code + "print(json.dumps(os.listdir('/packages')))\n"])[0]
        assert outcome.ok, outcome
        assert "numpy" in json.loads(outcome.output) and set(json.loads(outcome.output)) <= {"numpy", "numpy.libs"}
        unlisted = pool.run(["import yaml\n"])[0]  # installed here, not named
        assert unlisted.status == "failed" and "No module named 'yaml'" in unlisted.output, unlisted
        assert PACKAGES_DIR.strip("/") in sandbox_tops(pool.cfg)
    with SandboxPool(SandboxConfig(workers=1)) as pool:  # the default: the standard library alone
        assert "No module named 'numpy'" in pool.run(["import numpy\n"])[0].output
    with pytest.raises(SandboxUnavailable, match=r"eval\.sandbox\.packages: 'no_such_package_here' is not installed"):
        SandboxPool(SandboxConfig(packages=["no_such_package_here"]))
