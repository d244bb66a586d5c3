"""The task x method table: gains over the SFT start with paired intervals (seeds pooled per problem), greedy at
equal generated tokens, the gate's verdict, and rows of several tasks stacked into one table."""

from __future__ import annotations

import dataclasses
import json

import pytest

from essaflow.compare import task_table
from essaflow.compare.results import gate_evidence
from essaflow.gate.config import GateConfig
from tests.unit.compare.test_compare import _lifted_runs


def _rows(task: str = "arith"):
    sft, arms = _lifted_runs()
    summary = {"greedy": sft.greedy, "pass@1": sum(sft.correct_counts) / 128 / 256}
    evidence = gate_evidence(arms, sft, [1, 4, 16], GateConfig(), "proto")
    return {r["method"]: r for r in task_table.task_rows(task, arms, sft, summary, evidence, GateConfig())}


def test_a_clear_gain_has_an_interval_above_zero_and_noise_one_around_it():
    rows = _rows()
    start, grpo, essa, fgrpo = rows["SFT start"], rows["grpo"], rows["essa"], rows["fgrpo"]
    assert grpo["pass@1"]["gain"] == pytest.approx(0.05, abs=0.01) and grpo["pass@1"]["ci_low"] > 0.03
    assert grpo["pass@1"]["value"] == pytest.approx(start["pass@1"]["value"] + grpo["pass@1"]["gain"], abs=1e-3)
    assert essa["pass@1"]["ci_low"] < 0 < essa["pass@1"]["ci_high"]
    assert fgrpo["pass@1"]["gain"] == pytest.approx(0.025, abs=0.01)  # +5 and +0: pooled per problem
    assert all(r["greedy"]["gain"] == 0 and r["greedy"]["ci_low"] == r["greedy"]["ci_high"] == 0
               for m, r in rows.items() if m != "SFT start")  # fmt: skip
    assert grpo["gate"] == "would promote (3/3 seeds)" and essa["gate"] == "would not promote (0/3 seeds)"
    assert fgrpo["gate"] == "mixed (1/2 seeds)" and grpo["seeds"] == 3 and start["pass@256"] > grpo["pass@1"]["value"]


def test_greedy_at_equal_tokens_reads_each_run_at_the_fewest_tokens_any_method_generated():
    sft, arms = _lifted_runs()
    curve = [{"train_s": 0.0, "generated_tokens": 0.0, "greedy": 0.30},
             {"train_s": 5.0, "generated_tokens": 500.0, "greedy": 0.35},
             {"train_s": 9.0, "generated_tokens": 3000.0, "greedy": 0.45}]  # fmt: skip
    long = dataclasses.replace(arms[0], curve=curve, usage={"generated_tokens": 4000})
    short = dataclasses.replace(arms[3], usage={"generated_tokens": 1000})  # final greedy: its summary's
    assert task_table.greedy_at_tokens(long, 1000) == 0.35  # its last check within 1,000 tokens
    assert task_table.greedy_at_tokens(long, 4000) == long.summary["greedy"]  # the final evaluation
    assert task_table.greedy_at_tokens(short, 1000) == short.summary["greedy"]
    evidence = gate_evidence([long, short], sft, [1], GateConfig(), "proto")
    rows = task_table.task_rows("t", [long, short], sft, {"greedy": 0.3, "pass@1": 0.3}, evidence, GateConfig())
    assert rows[1]["equal_tokens"] == 1000 and rows[1]["equal_tokens_greedy"] == 0.35


def test_rows_of_several_tasks_stack_into_one_markdown_table_and_survive_json():
    rows = [*_rows("arithmetic").values(), *_rows("countdown").values()]
    lines = task_table.markdown(json.loads(json.dumps(rows)))
    assert len(lines) == 2 + len(rows) and lines[0].count("|") == lines[2].count("|")
    grpo = next(line for line in lines if line.startswith("| countdown | grpo"))
    assert "(+5." in grpo or "(+4." in grpo
    assert "would promote (3/3 seeds)" in grpo and "(pass@256)" in grpo
    assert lines[2].startswith("| arithmetic | SFT start |")
