"""The bad-input sweep, environment-and-commands half: the environment variables a run reads and the commands' own
arguments (outside a config), each refused before any compute with one `error:` line naming the variable, argument,
file or row and the fix, or accepted and handled right. No server.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli.pipeline
from cli.main import app
from essaflow.config import ConfigError

# ------------------------------------------------------------------------------------------ shared

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def no_compute(monkeypatch):
    """Every case here must be answered before the flow starts."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the flow started")

    monkeypatch.setattr(cli.pipeline, "finetune_summary", refuse)


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def _refused(args: list[str], code: int = 2) -> list[str]:
    """The `error:` lines of a command refused with `code`; no traceback on either stream."""
    result = CliRunner().invoke(app, args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and not isinstance(result.exception, AssertionError), result.output
    return _errors(result)


def _run_refused(tmp_path, *words: str) -> list[str]:
    """`essaflow run` on an empty preset, refused before its flow: its error lines; its JSON line last."""
    preset = tmp_path / "run.yaml"
    preset.write_text("{}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress", *[a for w in words for a in ("--set", w)]])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["stage"] == "config" and last["resume"] is None
    return _errors(result)


# ------------------------------------------------------------------------------------------ environment variables

NUMBER_RULES = {
    "ESSAFLOW_HEARTBEAT_S": "the seconds between a run's lease heartbeats (a number > 0, default 30)",
    "ESSAFLOW_S3_RETRY_TIMEOUT_S": "the seconds an S3 operation keeps retrying a transient failure (a number >= 0, "
                                   "default 20)",
    "ESSAFLOW_RETRY_BACKOFF_SCALE": "the factor on every pipeline task's retry backoff (a number >= 0, default 1)",
}  # fmt: skip
NOT_NUMBERS = [("abc", "is not a number"), ("1,5", "is not a number"), ("nan", "is out of range"),
               ("inf", "is out of range"), ("-1", "is out of range")]  # fmt: skip
NUMBER_CASES = [(var, value, why) for var in NUMBER_RULES for value, why in NOT_NUMBERS]
NUMBER_CASES += [("ESSAFLOW_HEARTBEAT_S", "0", "is out of range")]


@pytest.mark.parametrize(("var", "value", "why"), NUMBER_CASES, ids=[f"{v}={x}" for v, x, _ in NUMBER_CASES])
def test_a_numeric_variable_that_is_no_number_names_the_variable_and_value(monkeypatch, tmp_path, var, value, why):
    monkeypatch.setenv(var, value)
    expected = f"error: {var}={value!r} {why}: set it to {NUMBER_RULES[var]}, or unset it"
    assert _refused(["check-config", "--no-inputs"]) == [expected]
    assert _run_refused(tmp_path) == [expected]


def test_each_numeric_variable_is_refused_where_it_is_read(monkeypatch, tmp_path):
    """The readers themselves (a heartbeat thread, a store opened mid-run, the tasks' import) raise the same line."""
    from essaflow.runs.lease import heartbeat_s
    from essaflow.storage import open_store
    from tasks.retry import retry_policy

    for var, read in [
        ("ESSAFLOW_HEARTBEAT_S", heartbeat_s),
        ("ESSAFLOW_S3_RETRY_TIMEOUT_S", lambda: open_store("s3://bucket/prefix")),
        ("ESSAFLOW_RETRY_BACKOFF_SCALE", retry_policy),
    ]:
        monkeypatch.setenv(var, "abc")
        with pytest.raises(ConfigError, match=f"^{var}='abc' is not a number: "):
            read()
        monkeypatch.setenv(var, "")  # empty: the default
        read()
        monkeypatch.delenv(var)
    monkeypatch.setenv("ESSAFLOW_HEARTBEAT_S", "0.5")
    assert heartbeat_s() == 0.5


@pytest.mark.parametrize(
    ("where", "why"),
    [("/proc/nope", ": cannot create or write there (No such file or directory): set ESSAFLOW_CACHE_DIR to a writable "
                    "directory, or unset it (built models, SFT adapters, run journals)"),
     ("FILE", " is not a directory: set ESSAFLOW_CACHE_DIR to a writable directory")],
)  # fmt: skip
def test_a_cache_directory_that_cannot_be_written_is_named(monkeypatch, tmp_path, where, why):
    if where == "FILE":
        where = str(tmp_path / "a-file")
        (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", where)
    expected = f"error: ESSAFLOW_CACHE_DIR={where!r}{why}"
    assert _refused(["check-config", "--no-inputs"]) == [expected]
    assert _run_refused(tmp_path) == [expected]  # before the run, whose failure hooks journal under the cache


def test_a_writable_cache_directory_is_made_when_missing(monkeypatch, tmp_path):
    from essaflow.storage.cache_dir import cache_dir_problem

    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", str(tmp_path / "new" / "cache"))
    assert cache_dir_problem() is None and (tmp_path / "new" / "cache").is_dir()


def test_a_deployments_run_names_an_unwritable_cache_and_its_failure_hooks_do_not_fail(monkeypatch):
    """No CLI preflight: the run's first task names the directory, and the hooks that journal the failure under it
    only warn."""
    from types import SimpleNamespace

    from essaflow.config import load_config
    from essaflow.runs import journal
    from essaflow.runs.journal import Journal
    from essaflow.runs.opening import FlowRun, open_pipeline_run
    from tasks import failures

    warned = []
    monkeypatch.setattr(journal.log, "warning", lambda msg, *args: warned.append(msg % args))
    monkeypatch.setenv("ESSAFLOW_CACHE_DIR", "/proc/nope")
    with pytest.raises(ConfigError, match=r"^ESSAFLOW_CACHE_DIR='/proc/nope': cannot create or write there "):
        open_pipeline_run(load_config(None, []), None, FlowRun(), Journal("flow-1"))
    task_run = SimpleNamespace(flow_run_id="flow-1", id="t1", name="open_run", run_count=1)
    failures.on_task_failure(None, task_run, SimpleNamespace(result=lambda: (_ for _ in ()).throw(ConfigError("x"))))
    assert warned and warned[-1].startswith("stage journal /proc/nope/journal/flow-1.jsonl not written")


ENDPOINT_FIX = "give http(s)://host[:port] of the S3 server (e.g. http://127.0.0.1:8333), or unset it for AWS S3"
S3_CASES = {
    "endpoint-word": ({"ESSAFLOW_S3_ENDPOINT_URL": "garbage"},
                      f"ESSAFLOW_S3_ENDPOINT_URL='garbage' is not an endpoint URL: {ENDPOINT_FIX}"),
    "endpoint-no-host": ({"AWS_ENDPOINT_URL": "http://:9000"},
                         f"AWS_ENDPOINT_URL='http://:9000' is not an endpoint URL: {ENDPOINT_FIX}"),
    "endpoint-port": ({"AWS_ENDPOINT_URL_S3": "http://s3:port"},
                      "AWS_ENDPOINT_URL_S3='http://s3:port' is malformed (Port could not be cast to integer value as "
                      f"'port'): {ENDPOINT_FIX}"),
    "endpoint-password-masked": ({"ESSAFLOW_S3_ENDPOINT_URL": "ftp://key:hunter2@s3"},
                                 f"ESSAFLOW_S3_ENDPOINT_URL='ftp://s3' is not an endpoint URL: {ENDPOINT_FIX}"),
    "region-space": ({"AWS_REGION": "us east 1"}, "AWS_REGION='us east 1' is not a region name (letters, digits and "
                                                  "'-', e.g. us-east-1): fix it or unset it"),
    "region-default": ({"AWS_DEFAULT_REGION": "eu_west_1"}, "AWS_DEFAULT_REGION='eu_west_1' is not a region name "
                       "(letters, digits and '-', e.g. us-east-1): fix it or unset it"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(S3_CASES))
def test_an_s3_variable_boto3_refuses_is_named_where_the_config_uses_s3(monkeypatch, tmp_path, case):
    from essaflow.storage import StorageError, open_store

    for var in ("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION",
                "AWS_DEFAULT_REGION"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    env, expected = S3_CASES[case]
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(StorageError, match="^") as err:
        open_store("s3://bucket/prefix")
    assert str(err.value) == expected and err.value.kind == "invalid"
    s3 = "storage_uri=s3://bucket/prefix"
    assert _refused(["check-config", "--no-inputs", "--set", s3]) == [f"error: {expected}"]
    assert _run_refused(tmp_path, s3) == [f"error: {expected}"]
    assert _refused(["check-config", "--no-inputs"], code=0) == []  # a config that never opens S3: not its business


def test_an_s3_store_given_a_bad_endpoint_directly_says_which(monkeypatch):
    from essaflow.storage import S3Store, StorageError

    with pytest.raises(StorageError, match=r"^S3 client for s3://b/p \(endpoint garbage, region 'us-east-1'\): "
                                           "Invalid endpoint: garbage$"):  # fmt: skip
        S3Store("b", "p", endpoint_url="garbage", access_key="a", secret_key="b")


@pytest.mark.parametrize("var", ["ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"])
def test_an_s3_endpoint_where_nothing_listens_is_refused_at_once_naming_its_variable(monkeypatch, tmp_path, var):
    from devstack import free_port
    from essaflow.storage import StorageError, open_store

    for name in ("ESSAFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    url = f"http://127.0.0.1:{free_port()}"  # up to the host, the port closed
    monkeypatch.setenv(var, url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    expected = (f"S3 endpoint {url} is unreachable: connection refused, nothing listens there (storage_uri "
                f"s3://bucket/x); start the S3 server, or set {var} to one that runs")  # fmt: skip
    start = time.monotonic()
    with pytest.raises(StorageError) as err:
        open_store("s3://bucket/x").get_json("comparison.json")  # any first request (compare-table's, say)
    assert str(err.value) == expected and err.value.kind == "refused" and not err.value.transient
    preset = tmp_path / "run.yaml"
    preset.write_text(f"storage_uri: s3://bucket/x\ntracking_uri: sqlite:///{tmp_path}/mlflow.db\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress"])
    assert result.exit_code == 1 and _errors(result) == [f"error: preflight: StorageError: {expected}"], result.output
    assert _refused(["compare-table", "s3://bucket/x"], code=1) == [f"error: compare-table: s3://bucket/x: {expected}"]
    assert time.monotonic() - start < 5  # was 20-24 s each: retried as a transient failure


# ------------------------------------------------------------------------------------------ the commands' arguments


def test_demo_with_an_unknown_method_lists_the_methods():
    assert _refused(["demo", "--method", "foo", "--no-progress"]) == [
        "error: --method 'foo': choose one of essa, fgrpo, none"
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["essa", "-c", "configs/tiny-fgrpo.yaml"], "configs/tiny-fgrpo.yaml says method: fgrpo, but `essaflow "
         "essa` trains essa: run `essaflow grpo` (or `essaflow run`) on it, or set method: essa"),
        (["grpo", "-c", "configs/tiny-essa.yaml"], "configs/tiny-essa.yaml says method: essa, but `essaflow grpo` "
         "trains fgrpo: run `essaflow essa` (or `essaflow run`) on it, or set method: fgrpo"),
        (["grpo", "-c", "configs/tiny-fgrpo.yaml", "--set", "method=essa"], "--set says method: essa, but "
         "`essaflow grpo` trains fgrpo: run `essaflow essa` (or `essaflow run`) on it, or set method: fgrpo"),
    ],
)  # fmt: skip
def test_a_job_refuses_a_config_for_the_other_trainer(monkeypatch, args, expected):
    import cli.jobs

    monkeypatch.setattr(cli.jobs, "_training_job", lambda cfg: (_ for _ in ()).throw(AssertionError("trained")))
    assert _refused(args) == [f"error: {expected}"]


@pytest.mark.parametrize(("command", "config", "method"), [("essa", "configs/tiny.yaml", "essa"),
                                                           ("grpo", "configs/tiny.yaml", "fgrpo"),
                                                           ("grpo", None, "fgrpo")])  # fmt: skip
def test_a_job_trains_a_config_of_method_none_or_unset_with_its_own_trainer(monkeypatch, command, config, method):
    import cli.jobs

    seen = []
    monkeypatch.setattr(cli.jobs, "_training_job", seen.append)
    result = CliRunner().invoke(app, [command, *(["-c", config] if config else [])])
    assert result.exit_code == 0, result.output
    assert [c.method for c in seen] == [method]


START_ROW = {"task": "t", "method": "SFT start", "label": "SFT start", "pass@4": 0.5, "greedy": {"value": 0.3},
             "pass@1": {"value": 0.3}, "equal_tokens_greedy": 0.3}  # fmt: skip
CELL = {"value": 0.35, "gain": 0.05, "ci_low": 0.01, "ci_high": 0.09}
METHOD_ROW = {"task": "t", "method": "essa", "label": "ESSA", "seeds": 1, "greedy": CELL, "pass@1": CELL,
              "pass@4": 0.6, "train_wall_s": 10.0, "steps": [3], "generated_tokens": 100, "bytes_per_update": 8.0,
              "equal_tokens": 100, "equal_tokens_greedy": 0.35, "gate": "would promote (1/1 seeds)"}  # fmt: skip
FIX = "give the comparison.json of `essaflow compare` (or its report folder)"
TABLES = {
    "empty-object": ({}, f"not a comparison report: no task_table (an empty object); {FIX}"),
    "unrelated": ({"name": "x", "version": 2}, f"not a comparison report: no task_table (its keys: name, version); "
                                               f"{FIX}"),
    "list": ([1, 2], f"not a comparison report: a JSON list, not an object with task_table; {FIX}"),
    "string": ("hello", f"not a comparison report: a JSON str, not an object with task_table; {FIX}"),
    "older-report": ({"compare": "c", "runs": []}, "no task_table in this comparison.json (a report written before "
                                                   "the table existed); run the comparison again"),
    "empty-table": ({"compare": "c", "runs": [], "task_table": []}, "task_table is empty: the comparison recorded no "
                                                                    "rows; run the comparison again"),
    "table-object": ({"task_table": {}}, f"not a comparison report: task_table is a JSON dict, not a list of rows; "
                                         f"{FIX}"),
    "row-number": ({"task_table": [START_ROW, 7]}, "task_table row 2: is a JSON int, not an object"),
    "row-bare": ({"task_table": [{"task": "t", "method": "m"}]}, "task_table row 1: lacks greedy, pass@1, "
                 "equal_tokens_greedy, label, train_wall_s, steps, generated_tokens, equal_tokens, bytes_per_update, "
                 "gate, pass@<n>"),
    "row-no-pass-at-n": ({"task_table": [{k: v for k, v in START_ROW.items() if k != "pass@4"}]},
                         "task_table row 1: lacks pass@<n>"),
    "row-cell-a-number": ({"task_table": [START_ROW, {**METHOD_ROW, "greedy": 0.4}]},
                          "task_table row 2: a value of the wrong kind (TypeError: 'float' object is not "
                          "subscriptable)"),
    "row-no-steps": ({"task_table": [START_ROW, {**METHOD_ROW, "steps": []}]},
                     "task_table row 2: steps is [], not a list of each seed's steps"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TABLES))
def test_compare_table_says_what_is_wrong_with_the_file(tmp_path, case):
    body, expected = TABLES[case]
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps(body))
    result = CliRunner().invoke(app, ["compare-table", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert _errors(result) == [f"error: compare-table: {path}: {expected}"]
    assert json.loads(result.stdout.splitlines()[-1])["stage"] == "compare-table"


def test_compare_table_reads_good_rows(tmp_path):
    path = tmp_path / "comparison.json"
    path.write_text(json.dumps({"task_table": [START_ROW, METHOD_ROW]}))
    result = CliRunner().invoke(app, ["compare-table", str(path)])
    assert result.exit_code == 0, result.output
    assert "| t | ESSA | 0.350 (+5.0 [+1.0, +9.0])" in result.stdout
    assert json.loads(result.stdout.splitlines()[-1])["rows"] == [START_ROW, METHOD_ROW]


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("not-a-url", "'not-a-url' is not an http(s) URL with a host"),
        ("hooks.example.com/services/T0/B0/secret", "'hooks.example.com/...' is not an http(s) URL with a host"),
        ("ftp://relay/hook", "'ftp://relay/...' is not an http(s) URL with a host"),
        ("https://", "'https://' is not an http(s) URL with a host"),
        ("http://relay:port/hook", "'http://relay:port/...' is malformed (Port could not be cast to integer value as "
                                   "'port')"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("from_env", [False, True])
def test_deploy_refuses_a_webhook_that_is_no_http_url_before_creating_anything(monkeypatch, given, expected, from_env):
    import subprocess

    import flows.alerts

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(AssertionError("deployed")))
    monkeypatch.setattr(flows.alerts, "define_alerts", lambda *a: (_ for _ in ()).throw(AssertionError("alerted")))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:1/api")
    if from_env:
        monkeypatch.setenv("ESSAFLOW_ALERT_WEBHOOK_URL", given)
    args = ["deploy"] if from_env else ["deploy", "--alert-webhook", given]
    where = "ESSAFLOW_ALERT_WEBHOOK_URL" if from_env else "--alert-webhook"
    assert _refused(args) == [f"error: {where}: {expected}: give the http(s):// URL to post to"]
    assert "secret" not in CliRunner().invoke(app, args).output  # a webhook's path may be its token


@pytest.mark.parametrize("key", ["method", " method "])
def test_a_compare_method_that_sets_its_trainer_in_set_is_refused(tmp_path, key):
    """Its trainer would run without the compare's budget (grpo.time_budget_s=None on an essa arm turned fgrpo)."""
    bad = tmp_path / "cmp.yaml"
    bad.write_text(f"name: c\nbudget_s: 5\nseeds: [0]\nmethods: [{{name: e, method: essa, set: {{'{key}': fgrpo}}}}]\n"
                   "task: {name: t}\n")  # fmt: skip
    expected = ["error: invalid config: methods.0.set: method 'fgrpo' is this method's trainer: give it as `method:` "
                "beside `set`, not inside it"]  # fmt: skip
    assert _refused(["check-config", "-c", str(bad), "--no-inputs"]) == expected
    assert _refused(["compare", str(bad), "--no-progress"]) == expected


def test_every_compare_arm_trains_under_the_compare_budget():
    from essaflow.compare import load_compare_config

    cfg = load_compare_config("configs/compare-tiny.yaml")
    for arm in cfg.arms():
        assert arm.config.trained_section().time_budget_s == cfg.budget_s, arm.name


def test_a_compare_files_reward_file_is_relative_to_the_compare_file(tmp_path, monkeypatch):
    from essaflow.compare import load_compare_config

    sub = tmp_path / "cmp"
    sub.mkdir()
    (sub / "myreward.py").write_text("def score(completion, reference):\n    return 1.0\n")
    (sub / "half.py").write_text("def score(completion, reference):\n    return 0.5\n")
    (sub / "c.yaml").write_text("name: c\nbudget_s: 5\nseeds: [0]\nmethods: [{name: e, method: essa}, {name: f, "
                                "method: fgrpo, set: {eval.reward: half.py:score}}]\n"
                                "task: {extends: ../../../configs/tiny.yaml, eval: {reward: myreward.py:score}}\n"
                                .replace("../../../configs", str(REPO / "configs")))  # fmt: skip
    monkeypatch.chdir(tmp_path)  # another folder: no myreward.py here
    cfg = load_compare_config(sub / "c.yaml")
    assert cfg.task.eval.reward == f"{sub / 'myreward.py'}:score"
    assert {a.name: a.config.eval.reward for a in cfg.arms()} == {
        "e-s0": f"{sub / 'myreward.py'}:score", "f-s0": f"{sub / 'half.py'}:score"}  # fmt: skip
    result = CliRunner().invoke(app, ["check-config", "-c", str(sub / "c.yaml"), "--no-inputs"])
    assert result.exit_code == 0, result.output


def test_gc_on_a_store_folder_that_is_not_there_says_so_at_once(tmp_path, monkeypatch):
    import flows.gc

    monkeypatch.setattr(flows.gc, "gc", lambda *a, **k: (_ for _ in ()).throw(AssertionError("the flow started")))
    missing = tmp_path / "no-such-store"
    assert _refused(["gc", "--dry-run", "--storage-uri", f"file://{missing}"]) == [
        f"error: storage_uri file://{missing}: does not exist, so there is nothing to collect: give the artifact "
        "root your runs write to (--storage-uri, or ESSAFLOW_STORAGE_URI)"
    ]
    (tmp_path / "a-file").write_text("")
    assert "is not a directory" in _refused(["gc", "--storage-uri", str(tmp_path / "a-file")])[0]


# ------------------------------------------------------------------------------------------ the run's rows and reward


def _own_task(tmp_path, reward: str, rows: list[dict] | None = None) -> list[str]:
    """--set words of a run on a JSONL file of 40 sums judged by a reward file of `reward`'s text (function r)."""
    rows = rows or [{"id": f"p{i}", "prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(40)]
    (tmp_path / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "my_reward.py").write_text(reward)
    return ["data.source=file", f"data.path={tmp_path / 'sums.jsonl'}", "data.eval_size=8",
            f"eval.reward={tmp_path / 'my_reward.py'}:r"]  # fmt: skip


GOOD_REWARD = "def r(completion, reference):\n    return float(completion.strip() == reference)\n"


def test_run_reads_every_row_before_prefect_starts(tmp_path):
    rows = [{"id": f"p{i}", "prompt": f"{i}+1=", "answer": str(i + 1), "hint": i if i < 25 else f"h{i}"}
            for i in range(40)]  # fmt: skip
    path = tmp_path / "sums.jsonl"
    assert _run_refused(tmp_path, *_own_task(tmp_path, GOOD_REWARD, rows)) == [
        f"error: data.path: {path}: field 'hint' is a number in 25 row(s) (first: row 0, id 'p0') and text in 15 "
        "row(s) (first: row 25, id 'p25'): give it one type in every row (a reward reading it expects one)"
    ]
    words = _own_task(tmp_path, GOOD_REWARD)
    path.write_text(path.read_text() + "{not json\n")  # line 41: past the rows the reward is tried on
    errors = _run_refused(tmp_path, *words)
    assert len(errors) == 1 and errors[0].startswith(f"error: data.path: 1 malformed row(s) in {path}: line 41"), errors


def test_run_names_code_tests_of_the_wrong_type_before_prefect_starts(tmp_path):
    words = [w for w in _code_rows(tmp_path, ["assert double(2) == 4"])[2:] if w != "--set"]
    errors = _run_refused(tmp_path, *words)
    assert len(errors) == 1 and "problem.fields['tests'] must be Python text" in errors[0], errors


def test_a_run_on_a_built_in_task_with_a_built_in_reward_reads_and_tries_nothing_ahead(monkeypatch):
    import essaflow.checks.preflight
    import essaflow.checks.reward
    from essaflow.checks.preflight import run_input_problems
    from essaflow.config import load_config

    def refuse(*_a, **_k):
        raise AssertionError("read or tried")

    monkeypatch.setattr(essaflow.checks.preflight, "check_data_rows", refuse)
    monkeypatch.setattr(essaflow.checks.reward, "check_reward", refuse)
    for preset in ("configs/tiny.yaml", "configs/tiny-code.yaml", "configs/tiny-countdown.yaml"):
        cfg = load_config(REPO / preset)
        start = time.perf_counter()
        assert run_input_problems(cfg) == ([], [])
        assert time.perf_counter() - start < 0.1, preset


# ------------------------------------------------------------------------------------------ services and --resume


def test_a_dead_tracking_server_is_named_by_the_preflight(tmp_path, monkeypatch):
    from devstack import free_port

    monkeypatch.chdir(tmp_path)
    port = free_port()
    preset = tmp_path / "run.yaml"
    preset.write_text(f"tracking_uri: http://alice:hunter2@127.0.0.1:{port}\n")
    result = CliRunner().invoke(app, ["run", str(preset), "--no-progress"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert _errors(result) == [f"error: preflight: TrackingError: MLflow tracking server http://127.0.0.1:{port} is "
                               "unreachable (ConnectionError); start it (essaflow stack up) or point "
                               "MLFLOW_TRACKING_URI / tracking_uri at a running server"]  # fmt: skip
    assert json.loads(result.stdout.splitlines()[-1])["stage"] == "preflight" and "hunter2" not in result.output


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """A preset on a file store and a sqlite tracking store of its own, with one failed and one completed run of
    pipeline `resumed` and one run of pipeline `other` recorded."""
    from essaflow import tracking
    from essaflow.config import load_config
    from essaflow.runs.record import record_run
    from essaflow.storage import open_store

    monkeypatch.chdir(tmp_path)
    store_uri, tracking_uri = f"file://{tmp_path}/store", f"sqlite:///{tmp_path}/mlflow.db"
    preset = tmp_path / "run.yaml"
    preset.write_text(f"name: resumed\nmethod: essa\nstorage_uri: {store_uri}\ntracking_uri: {tracking_uri}\n")
    store = open_store(store_uri)
    cfg = load_config(preset)
    for run_id, status in (("run-failed", "FAILED"), ("run-done", "FINISHED")):
        record_run(store, run_id, cfg)
        tracking.finish_run(tracking.start_run(cfg, tracking_uri, run_id, {}), status)
    record_run(store, "run-other", load_config(None, ["name=other", "method=fgrpo", "seed=7"]))
    return preset


@pytest.mark.parametrize(
    ("resume", "expected"),
    [
        ("../x", "resume: '../x' is not a run id (letters, digits, '-', '_', '.')"),
        ("nope", "resume: no run 'nope' in file://STORE (no runs/nope/record/manifest.json)"),
        ("run-other", "resume run-other: that is a run of pipeline 'other', not of 'resumed': resume it with the "
                      "config it was started with, or start a new run without --resume"),
        ("run-done", "resume run-done: that run completed (its MLflow run is FINISHED), so there is nothing to "
                     "resume; start a new run without --resume (--force trains even when nothing is new)"),
    ],
)  # fmt: skip
def test_a_resume_that_cannot_be_is_refused_before_prefect_starts(stores, tmp_path, resume, expected):
    expected = expected.replace("file://STORE", f"file://{tmp_path}/store")
    assert _refused(["run", str(stores), "--no-progress", "--resume", resume]) == [f"error: {expected}"]


def test_resume_last_with_no_failed_run_is_refused_before_prefect_starts(stores, tmp_path):
    args = ["run", str(stores), "--no-progress", "--resume", "last", "--set", "name=fresh"]
    assert _refused(args) == [
        f"error: resume last: no failed run of pipeline 'fresh' at sqlite:///{tmp_path}/mlflow.db"
    ]


def test_a_resume_of_a_failed_run_passes_the_preflight(stores):
    result = CliRunner().invoke(app, ["run", str(stores), "--no-progress", "--resume", "run-failed"])
    assert isinstance(result.exception, AssertionError) and "the flow started" in str(result.exception)


def test_a_changed_config_lists_a_few_fields_and_counts_the_rest():
    from essaflow.checks.resume import check_resumable
    from essaflow.config import load_config

    saved = load_config(None, ["method=essa"])
    changed = load_config(None, ["method=essa", "seed=9", "essa.population=6", "essa.sigma0=0.5", "essa.alpha=0.5",
                                 "essa.es_lr=0.1", "data.eval_size=8", "essa.minibatch=16"])  # fmt: skip
    with pytest.raises(ConfigError) as err:
        check_resumable(saved, changed, "r1")
    message = str(err.value)
    assert message.startswith("resume r1: the config differs from the run's in 7 fields its trajectory depends on (")
    assert message.count(" -> ") == 6 and "; and 1 more); restore them" in message and len(message) < 600


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "builtin:nope"], "--model 'builtin:nope': not a built-in model; choose from ['builtin:tiny', "
                                      "'builtin:tiny-countdown', 'builtin:tiny-programs']"),
        (["--out", "/proc/x"], "--out '/proc/x': cannot write in '/proc' (No such file or directory): give a "
                               "writable directory"),
        (["--out", "FILE"], "--out 'FILE': is a file, not a directory"),
    ],
)  # fmt: skip
def test_build_tiny_checks_its_arguments_before_loading_or_building_anything(monkeypatch, tmp_path, args, expected):
    import sys

    monkeypatch.setitem(sys.modules, "essaflow.model.tiny", None)  # torch and the builder: an import would fail
    if "FILE" in args:
        (tmp_path / "a-file").write_text("")
        args = [str(tmp_path / "a-file") if a == "FILE" else a for a in args]
        expected = expected.replace("FILE", str(tmp_path / "a-file"))
    assert _refused(["build-tiny", *args], code=1) == [f"error: build-tiny: {expected}"]


# ------------------------------------------------------------------------------------------ the sandbox in check-config


def _no_sandbox(message: str):
    from essaflow.sandbox.bubblewrap import SandboxUnavailable

    def probe(_argv):
        raise SandboxUnavailable(message)

    return probe


@pytest.mark.parametrize("case", ["wrong-path", "not-installed", "no-namespaces"])
def test_a_sandbox_that_cannot_start_is_one_line_in_check_config(monkeypatch, case):
    from essaflow.sandbox import bubblewrap

    words = ["--set", f"eval.sandbox.bwrap_path=/no/such/bwrap-{case}"]  # a pool of its own: none is cached
    if case == "wrong-path":
        monkeypatch.setattr(bubblewrap.shutil, "which", lambda name: "/usr/bin/bwrap" if name == "bwrap" else None)
        expected = (
            f"eval.sandbox.bwrap_path '/no/such/bwrap-{case}' is not an executable file; bubblewrap is "
            "installed at /usr/bin/bwrap: set the field to that path, or remove it to use bwrap from PATH"
        )
    elif case == "not-installed":
        monkeypatch.setattr(bubblewrap.shutil, "which", lambda name: None)
        expected = f"bubblewrap not found ('/no/such/bwrap-{case}' (eval.sandbox.bwrap_path): no such executable): "
    else:
        monkeypatch.setattr(bubblewrap.shutil, "which", lambda name: name)
        monkeypatch.setattr(bubblewrap, "sandbox_layout", lambda python, packages=(): ())  # it would run python, ldd
        monkeypatch.setattr(bubblewrap, "_probe", _no_sandbox("bubblewrap cannot create a sandbox here (denied)"))
        expected = "bubblewrap cannot create a sandbox here (denied)"
    errors = _refused(["check-config", "-c", "configs/tiny-code.yaml", "--no-machine", *words])
    assert len(errors) == 1 and errors[0].startswith(f"error: {expected}"), errors


# ------------------------------------------------------------------------------------------ code_tests' rows

DOUBLE = "def double(x):\n    return 2 * x\n"


def _code_rows(tmp_path, tests, answer=DOUBLE, rows: int = 24) -> list[str]:
    """check-config's arguments for a file of `rows` code problems whose tests are `tests` (a value, or a function
    of the row's index), reward code_tests."""
    path = tmp_path / "code.jsonl"
    make = tests if callable(tests) else (lambda i: tests)
    path.write_text("".join(json.dumps({"id": f"c{i}", "prompt": f"double {i}", "answer": answer(i) if callable(answer)
                                        else answer, "tests": make(i)}) + "\n" for i in range(rows)))  # fmt: skip
    words = ["data.source=file", f"data.path={path}", "data.eval_size=4", "eval.reward=code_tests"]
    return ["check-config", "--no-machine", *[a for w in words for a in ("--set", w)]]


@pytest.mark.parametrize(("tests", "kind"), [(7, "a number"), (["assert double(2) == 4"], "a list")])
def test_code_tests_given_a_number_or_a_list_names_the_type_not_missing(tmp_path, tests, kind):
    errors = _refused(_code_rows(tmp_path, tests))
    assert errors == [
        "error: eval.reward code_tests: problem.fields['tests'] must be Python text (assert lines, or a check function "
        f"and its call), and 24 row(s) hold another type (row 0 (id 'c0'): {kind}; row 1 (id 'c1'): {kind}; row 2 "
        f"(id 'c2'): {kind}; row 3 (id 'c3'): {kind}; row 4 (id 'c4'): {kind}; ... 19 more): give it as one string "
        "in every row"
    ]


def test_code_tests_written_in_prose_name_the_tests_field_not_the_answers(tmp_path):
    prose = lambda i: "assert double(2) == 4\n" if i != 22 else "double(2) should be 4"  # noqa: E731 - row 22 only
    errors = _refused(_code_rows(tmp_path, prose))  # past the 20 rows whose references are tried
    assert errors == [
        "error: eval.reward code_tests: problem.fields['tests'] is no Python in 1 row(s) (row 22 (id 'c22'): "
        "SyntaxError, line 1: invalid syntax): give Python that raises when a solution is wrong (assert lines, or a "
        "check function and its call); no completion can pass those rows"
    ]


# ------------------------------------------------------------------------------------------ notes on task knobs


@pytest.mark.parametrize(
    ("words", "note"),
    [
        (["data.synthetic.countdown.count=4"], "note: data.synthetic.countdown.count set, but data.synthetic.task is "
                                               "arithmetic: ignored (data.synthetic.task: countdown reads it)"),
        (["data.synthetic.task=countdown", "data.synthetic.max_digits=5", "data.synthetic.operators=[+]"],
         "note: data.synthetic.max_digits, data.synthetic.operators set, but data.synthetic.task is countdown: "
         "ignored (data.synthetic.task: arithmetic reads them)"),
        (["data.synthetic.programs.domain=12"], "note: data.synthetic.programs.domain set, but data.synthetic.task is "
                                               "arithmetic: ignored (data.synthetic.task: programs reads it)"),
        (["data.source=file", "data.path=x.jsonl", "data.synthetic.min_digits=2"],
         "note: data.synthetic.min_digits set, but data.source is file: ignored (data.source: synthetic with "
         "data.synthetic.task: arithmetic reads it)"),
    ],
)  # fmt: skip
def test_task_knobs_no_task_reads_get_a_note(words, note):
    args = [a for w in words for a in ("--set", w)]
    result = CliRunner().invoke(app, ["check-config", "--no-inputs", *args])
    assert result.exit_code == 0 and note in result.stderr.splitlines(), result.output


@pytest.mark.parametrize("preset", ["configs/tiny-countdown.yaml", "configs/tiny-code.yaml", "configs/tiny.yaml"])
def test_a_preset_restating_another_tasks_defaults_gets_no_note(preset):
    result = CliRunner().invoke(app, ["check-config", "--no-inputs", "-c", preset])
    assert result.exit_code == 0 and "data.synthetic" not in result.stderr, result.stderr


# ------------------------------------------------------------------------------------------ rows


def _rows_file(path, deep_at: int, depth: int, rows: int = 40) -> None:
    lines = [json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) for i in range(rows)]
    lines[deep_at] = '{"prompt": "x", "answer": "1", "deep": ' + "[" * depth + "]" * depth + "}"
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("depth", "why"),
    [
        (300, "line 34, column 'deep': field 'deep' is nested more than 100 lists or objects deep: flatten it"),
        (1000, "line 34: a value nested too deeply to read (arrays or objects about a thousand levels deep): "
               "flatten it"),
    ],
)  # fmt: skip
def test_a_field_nested_a_thousand_deep_names_its_row(tmp_path, depth, why):
    path = tmp_path / "deep.jsonl"
    _rows_file(path, 33, depth)
    words = ["--set", "data.source=file", "--set", f"data.path={path}", "--set", "data.eval_size=10"]
    assert _refused(["check-config", *words]) == [f"error: data.path: 1 malformed row(s) in {path}: {why}"]
    dropped = CliRunner().invoke(app, ["check-config", *words, "--set", "data.on_bad_row=drop"])
    assert dropped.exit_code == 0 and "39 problems, 1 malformed row(s) dropped" in dropped.stderr, dropped.output


def test_a_json_file_nested_a_thousand_deep_is_named(tmp_path):
    from essaflow.data import DataError
    from essaflow.data.readers import read_file

    path = tmp_path / "deep.json"
    path.write_text('[{"prompt": "x", "answer": "1", "deep": ' + "[" * 1000 + "]" * 1000 + "}]")
    with pytest.raises(DataError, match=f"^{path}: a value nested too deeply to read "):
        read_file(path)


def test_a_field_of_another_type_after_row_20_is_named_by_check_config(tmp_path):
    path = tmp_path / "mixed.jsonl"
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "hint": i if i < 25 else f"h{i}", "k": 1.5 if i else 2}
            for i in range(60)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    words = ["--set", "data.source=file", "--set", f"data.path={path}", "--set", "data.eval_size=10"]
    assert _refused(["check-config", *words]) == [  # k: int and float are both numbers
        f"error: data.path: {path}: field 'hint' is a number in 25 row(s) (first: row 0, id '0') and text in 35 "
        "row(s) (first: row 25, id '25'): give it one type in every row (a reward reading it expects one)"
    ]
    path.write_text("".join(json.dumps({**r, "hint": None if r["hint"] == 3 else r["hint"]}) + "\n"
                            for r in rows[:25]))  # fmt: skip
    assert CliRunner().invoke(app, ["check-config", *words]).exit_code == 0  # nulls are no other type


# ------------------------------------------------------------------------------------------ task knobs


@pytest.mark.parametrize(
    "key", ["data.synthetic.operators", "data.synthetic.countdown.operators", "data.synthetic.programs.kinds"]
)
def test_an_empty_list_of_a_tasks_operators_is_refused_at_config_time(key):
    assert _refused(["check-config", "--no-inputs", "--set", f"{key}=[]"]) == [
        f"error: invalid config: {key}: List should have at least 1 item after validation, not 0"
    ]


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["data.synthetic.max_digits=1", "data.synthetic.operators=[+]"],
         "cannot draw 6000 distinct problems with digits 1-1 and operators ['+']: lower data.synthetic.num_problems, "
         "or give the arithmetic task's knobs more room"),
        (["data.synthetic.task=countdown", "data.synthetic.countdown.count=6", "data.synthetic.countdown.high=2"],
         "cannot draw 6000 distinct Countdown problems of 6 numbers in [1, 2] with targets up to 999: lower "
         "data.synthetic.num_problems, or give the countdown task's knobs more room"),
        (["data.synthetic.task=countdown", "data.synthetic.countdown.max_target=1"],
         "cannot draw 6000 distinct Countdown problems of 3 numbers in [1, 25] with targets up to 1: lower "
         "data.synthetic.num_problems, or give the countdown task's knobs more room"),
        (["data.synthetic.task=programs", "data.synthetic.programs.kinds=[abs]", "data.synthetic.programs.max_steps=1"],
         "cannot draw 6000 distinct program problems of up to 1 steps with 4 examples on inputs 0..9: lower "
         "data.synthetic.num_problems, or give the programs task's knobs more room"),
    ],
)  # fmt: skip
def test_task_knobs_that_hold_too_few_problems_are_one_line_in_seconds(words, said):
    import time

    task = next((w.split("=")[1] for w in words if w.startswith("data.synthetic.task=")), "arithmetic")
    model = {"arithmetic": "builtin:tiny"}.get(task, f"builtin:tiny-{task}")
    start = time.process_time()
    args = [a for w in [*words, f"model.name_or_path={model}"] for a in ("--set", w)]
    assert _refused(["check-config", "--no-machine", *args]) == [f"error: data.synthetic: {said}"]
    assert time.process_time() - start < 10  # the whole budget of draws took 14-38 s


def test_the_draws_stop_only_when_the_rate_of_new_problems_cannot_reach_the_number_asked():
    from essaflow.data.draws import WINDOW, draws

    assert len(list(draws(10, lambda: 0))) == 2000  # under one window: the whole budget
    assert len(list(draws(1000, lambda: 0))) == WINDOW  # none found in a window: out of reach at once
    looks = iter(range(1, 100))
    steady = list(draws(1000, lambda: next(looks) * 100))  # 100 new a window: 1,000 by the budget's end
    assert len(steady) == 1000 * 200
