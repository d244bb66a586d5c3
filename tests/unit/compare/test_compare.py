"""The compare library: the config builds every arm before compute, pass@k for every k from the counts, curves
from the trainers' rows, claims and gate verdicts computed from the runs, the report and its figures."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from essaflow.compare import CompareConfig, load_compare_config, plots, report
from essaflow.compare.results import (
    ArmResult,
    accuracy_curve,
    claims,
    gate_evidence,
    gate_verdicts,
    method_table,
    pass_at_k_curve,
)
from essaflow.compare.scaling import compare_projection
from essaflow.config_base import ConfigError
from essaflow.gate.config import GateConfig
from essaflow.judging.evaluation import EvalReport, pass_at_k

REPO = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def _cfg(**over) -> CompareConfig:
    tree = {"name": "t", "methods": [{"name": "essa", "method": "essa"},
                                     {"name": "grpo", "method": "fgrpo", "set": {"grpo.gamma": 0.0}}],
            "seeds": [3, 4], "budget_s": 12.5, **over}  # fmt: skip
    return CompareConfig.model_validate(tree)


def test_pass_curve_matches_the_unbiased_estimator_at_every_k():
    rng = random.Random(0)
    n = 32
    counts = [rng.choice([0, 0, 1, 5, 16, 31, 32]) for _ in range(40)]
    curve = pass_at_k_curve(counts, n)
    assert len(curve) == n
    for k in range(1, n + 1):
        expected = sum(pass_at_k(n, c, k) for c in counts) / len(counts)
        assert curve[k - 1] == pytest.approx(expected, abs=1e-12)
    assert all(a <= b + 1e-12 for a, b in zip(curve, curve[1:]))  # more tries never hurt


def test_arms_carry_the_method_the_seed_and_the_budget():
    cfg = _cfg()
    arms = cfg.arms()
    assert [a.name for a in arms] == ["essa-s3", "essa-s4", "grpo-s3", "grpo-s4"]
    essa, grpo = arms[0].config, arms[3].config
    assert essa.method == "essa" and essa.essa.seed == 3 and essa.essa.time_budget_s == 12.5
    assert grpo.method == "fgrpo" and grpo.grpo.gamma == 0.0 and grpo.grpo.seed == 4 and grpo.grpo.time_budget_s == 12.5
    assert grpo.sft == essa.sft and grpo.data == essa.data and grpo.name == "t"  # one SFT start, one task
    assert essa.sft.seed == grpo.sft.seed == 0


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"methods": [{"name": "x", "method": "fgrpo", "set": {"grpo.gama": 1}}]}, r"method 'x'.*grpo.gama.*unknown"),
        ({"methods": [{"name": "x", "method": "fgrpo", "set": {"grpo.gamma": -1}}]}, r"method 'x'.*grpo.gamma"),
        ({"methods": [{"name": "a", "method": "essa"}, {"name": "a", "method": "essa"}]}, "unique"),
        ({"methods": [{"name": "Bad Name", "method": "essa"}]}, "lowercase"),
        ({"task": {"method": "essa"}}, "task.method must be none"),
        ({"seeds": [1, 1]}, "seeds must be unique"),
        ({"budget_s": 0}, "budget_s"),
        ({"projection": {"grpo": "nope"}}, "projection.grpo"),
    ],
)
def test_a_bad_compare_config_fails_at_load_naming_the_field(over, message):
    with pytest.raises(ValueError, match=message):
        _cfg(**over)


def test_the_shipped_preset_compares_four_methods_on_three_seeds_with_n_256():
    cfg = load_compare_config(REPO / "configs" / "compare-tiny.yaml")
    assert [m.name for m in cfg.methods] == ["essa", "grpo", "fgrpo-g05", "fgrpo-g1"] and cfg.seeds == [0, 1, 2]
    assert cfg.task.eval.samples_per_problem == 256 and 256 in cfg.task.eval.ks
    gammas = {a.method: a.config.grpo.gamma for a in cfg.arms() if a.config.method == "fgrpo"}
    assert gammas == {"grpo": 0.0, "fgrpo-g05": 0.5, "fgrpo-g1": 1.0}
    over = load_compare_config(REPO / "configs" / "compare-tiny.yaml", ["budget_s=5", "seeds=[0]"])
    assert over.budget_s == 5 and len(over.arms()) == 4
    with pytest.raises(ConfigError, match="not found"):
        load_compare_config(REPO / "configs" / "nope.yaml")


@pytest.mark.parametrize(
    ("preset", "task", "reward", "model"),
    [("compare-countdown", "countdown", "countdown", "builtin:tiny-countdown"),
     ("compare-code", "programs", "code_tests", "builtin:tiny-programs")],
)  # fmt: skip
def test_the_task_presets_compare_the_same_methods_on_their_own_task_and_model(preset, task, reward, model):
    cfg = load_compare_config(REPO / "configs" / f"{preset}.yaml")
    tiny = load_compare_config(REPO / "configs" / "compare-tiny.yaml")
    assert [m.name for m in cfg.methods] == [m.name for m in tiny.methods] and cfg.seeds == [0, 1, 2]
    assert cfg.budget_s == tiny.budget_s and len(cfg.arms()) == 12
    assert cfg.task.data.synthetic.task == task and cfg.task.eval.reward == reward
    assert {a.config.model.name_or_path for a in cfg.arms()} == {model}  # one SFT start for every arm
    assert len({tuple(a.config.model.target_modules) for a in cfg.arms()}) == 1


def test_accuracy_curve_accumulates_the_budget_clock_and_tokens():
    essa_rows = [
        {"generation": 0, "eval_greedy": 0.5},
        {"generation": 1, "fitness_mean": 0.1, "wall_s": 2.0, "generated_tokens": 100},
        {"generation": 2, "fitness_mean": 0.2, "wall_s": 3.0, "generated_tokens": 50, "eval_greedy": 0.6},
    ]
    grpo_rows = [{"step": 1, "reward_mean": 0.1, "wall_s_mean": 1.5, "gen_tokens": 10, "eval_greedy": 0.55},
                 {"step": 2, "reward_mean": 0.1, "wall_s_mean": 0.5, "gen_tokens": 30, "eval_greedy": 0.7}]  # fmt: skip
    assert accuracy_curve(essa_rows, 0.5) == [
        {"train_s": 0.0, "generated_tokens": 0.0, "greedy": 0.5},
        {"train_s": 5.0, "generated_tokens": 150.0, "greedy": 0.6},
    ]
    assert [(p["train_s"], p["generated_tokens"], p["greedy"]) for p in accuracy_curve(grpo_rows, 0.5)] == [
        (0.0, 0.0, 0.5), (1.5, 10.0, 0.55), (2.0, 40.0, 0.7)
    ]  # fmt: skip


def _arm(method, label, seed, p1, p_top, greedy=0.5, n=16, bytes_=0.0) -> ArmResult:
    curve = [p1 + (p_top - p1) * (k - 1) / (n - 1) for k in range(1, n + 1)]
    return ArmResult(method, label, seed, {"greedy": greedy, "pass@1": p1}, curve, 10.0, 5,
                     {"generated_tokens": 1000 + seed, "forward_tokens": 2000, "backward_tokens": 0, "device_s": 3.0},
                     bytes_, [{"train_s": 0.0, "generated_tokens": 0.0, "greedy": 0.4},
                              {"train_s": 10.0, "generated_tokens": 1000.0, "greedy": greedy}],
                     fitness_kind="black-box reward" if method == "essa" else "", mlflow_run_id=f"r{seed}",
                     run_id=f"x-{method}-s{seed}")  # fmt: skip


ARMS = [
    _arm("essa", "ESSA(es, accuracy)", 0, 0.50, 0.80, bytes_=400), _arm("essa", "ESSA(es, accuracy)", 1, 0.52, 0.81),
    _arm("grpo", "GRPO", 0, 0.55, 0.70), _arm("grpo", "GRPO", 1, 0.57, 0.72),
    _arm("fgrpo-g1", "F-GRPO(gamma=1)", 0, 0.54, 0.78), _arm("fgrpo-g1", "F-GRPO(gamma=1)", 1, 0.55, 0.70),
]  # fmt: skip
SFT = {"greedy": 0.4, "pass@1": 0.45, "pass@16": 0.75}


def test_claims_are_computed_from_the_runs_with_their_spread():
    found = claims(ARMS, SFT, 16)
    by_claim = {c.checked.split(" ")[0]: c for c in found}
    grpo, focal, essa = by_claim["grpo"], by_claim["fgrpo-g1"], by_claim["essa"]
    assert grpo.numbers["mean_diff"] == pytest.approx(-0.04) and grpo.numbers["seeds_higher"] == 0
    assert "lower than the SFT start's by 4.00 points" in grpo.finding
    assert focal.numbers["mean_diff"] == pytest.approx(0.03) and focal.numbers["seeds_higher"] == 1  # 1 of 2 seeds
    assert essa.numbers["mean_diff"] == pytest.approx(-0.05) and "pass@1 is lower than grpo's" in essa.finding
    no_grpo = claims([a for a in ARMS if a.method != "grpo"], SFT, 16)
    assert len(no_grpo) == 1 and "not measured" in no_grpo[0].finding


def _measured(method: str, seed: int, counts: list[int], greedy: list[int], n: int = 256) -> ArmResult:
    """A run with per-problem outcomes on 128 problems (n samples each)."""
    curve = pass_at_k_curve(counts, n)
    arm = _arm(method, method, seed, curve[0], curve[-1], greedy=sum(greedy) / len(greedy), n=n)
    ids = [f"q{i}" for i in range(len(counts))]
    return dataclasses.replace(arm, problem_ids=ids, correct_counts=counts, greedy_correct=greedy)


def _lifted_runs() -> tuple[EvalReport, list[ArmResult]]:
    """An SFT start on 128 problems (n = 256) and runs of three methods: essa +0.3 points (noise), grpo +5 points
    on every seed, fgrpo +5 on one seed and +0 on the other; greedy unchanged."""
    rng = random.Random(7)
    rates = [rng.uniform(0.05, 0.6) for _ in range(128)]

    def draw(lift: float) -> list[int]:  # fresh samples of a model whose per-problem rates are lifted by `lift`
        return [sum(rng.random() < min(1.0, p + lift) for _ in range(256)) for p in rates]

    greedy = [int(p > 0.3) for p in rates]
    sft_counts = draw(0.0)
    sft = EvalReport(128, 256, sum(greedy) / 128, {}, sft_counts, [f"q{i}" for i in range(128)],
                     greedy_correct=greedy)  # fmt: skip
    arms = [
        *[_measured("essa", s, draw(0.003), greedy) for s in range(3)],  # +0.3 points: within noise
        *[_measured("grpo", s, draw(0.05), greedy) for s in range(3)],  # +5 points: a clear win
        _measured("fgrpo", 0, draw(0.05), greedy), _measured("fgrpo", 1, draw(0.0), greedy),
    ]  # fmt: skip
    return sft, arms


def test_gate_verdicts_apply_the_registrys_paired_rule_seed_by_seed():
    sft, arms = _lifted_runs()
    sft_counts = sft.correct_counts
    evidence = gate_evidence(arms, sft, [1, 4, 16], GateConfig(), "proto")
    verdicts = gate_verdicts(evidence, arms)
    assert all(abs(e.diff) < 0.01 and e.ci_low < 0 < e.ci_high and not e.promotes for e in evidence["essa"])
    assert verdicts["essa"].startswith("would not promote") and "0/3 seeds" in verdicts["essa"]
    assert verdicts["grpo"].startswith("would promote") and "128 problems" in verdicts["grpo"]
    assert verdicts["fgrpo"].startswith("mixed") and "1/2 seeds" in verdicts["fgrpo"]
    assert all(e.champion == pytest.approx(sum(sft_counts) / 128 / 256) for e in evidence["grpo"])


def test_method_table_spreads_every_figure_over_seeds():
    table = method_table(ARMS)
    assert table["grpo"]["pass@1"] == {"mean": 0.56, "std": pytest.approx(0.0141, abs=1e-4), "min": 0.55,
                                       "max": 0.57, "n": 2}  # fmt: skip
    assert table["essa"]["generated_tokens"]["mean"] == 1000.5 and table["essa"]["label"] == "ESSA(es, accuracy)"


def test_report_page_and_figures(tmp_path):
    cfg = _cfg(methods=[{"name": "essa", "method": "essa"}, {"name": "grpo", "method": "fgrpo"},
                        {"name": "fgrpo-g1", "method": "fgrpo"}], seeds=[0, 1],
               task={"eval": {"samples_per_problem": 16, "ks": [1, 4, 16]}})  # fmt: skip
    projection = compare_projection(None, None, 50.0, [1, 16, 128])
    assert projection["paper"]["speedup_16"] == pytest.approx(2.0, abs=0.05) and "gap" in projection["run"]
    verdicts = {"essa": "would not promote: (the gate's sentence)"}
    page = report.render(cfg, SFT, ARMS, claims(ARMS, SFT, 16), verdicts, projection,
                         {"mlflow": "run `p`", "passk.png": "http://x/passk.png"}, [])  # fmt: skip
    assert "| grpo | GRPO | 0.560 ± 0.014 [0.550-0.570]" in page and "## Task x method" in page
    assert "ESSA(es, accuracy)" in page and "black-box reward" in page and "not a measurement" in page
    assert "![passk.png](http://x/passk.png)" in page and "not projected" in page
    for name, fn in (("passk.png", lambda p: plots.plot_pass_curves(ARMS, [0.45] * 16, p)),
                     ("time_to_accuracy.png", lambda p: plots.plot_time_to_accuracy(ARMS, p)),
                     ("bytes.png", lambda p: plots.plot_bytes(ARMS, p))):  # fmt: skip
        assert fn(tmp_path / name).read_bytes().startswith(PNG)


def _seeded_curves(method: str, label: str, seeds: int) -> list[ArmResult]:
    """A method's seeds, each with its own trainer rows (a generation every 2-4 s, an eval every second one)."""
    arms = []
    for seed in range(seeds):
        rng = random.Random(seed)
        rows = [{"wall_s": rng.uniform(2, 4), "generated_tokens": rng.randint(100, 300), "fitness_mean": 0.1,
                 "eval_greedy": 0.4 + 0.01 * g if g % 2 else None} for g in range(1, 11)]  # fmt: skip
        arm = _arm(method, label, seed, 0.5, 0.8)
        arms.append(dataclasses.replace(arm, curve=accuracy_curve(rows, 0.4)))
    return arms


def test_time_to_accuracy_draws_one_line_per_seed_in_axis_order():
    import matplotlib.pyplot as plt

    arms = _seeded_curves("essa", "ESSA(es, accuracy)", 3) + _seeded_curves("grpo", "GRPO", 3)
    fig = plots.time_to_accuracy_figure(arms)
    try:
        for ax, x in zip(fig.axes, ("train_s", "generated_tokens")):
            lines = {line.get_gid(): line for line in ax.get_lines()}
            assert len(ax.get_lines()) == len(lines) == 6  # one per seed per method, none joined
            for a in arms:
                line = lines[f"{a.method}/seed{a.seed}"]
                xs = list(line.get_xdata())
                assert xs == [p[x] for p in a.curve] and len(xs) == 6  # the start and 5 evaluations
                assert all(u <= v for u, v in zip(xs, xs[1:])), (a.method, a.seed, xs)
                assert list(line.get_ydata()) == [p["greedy"] for p in a.curve]
            colours = {m: {lines[f"{m}/seed{s}"].get_color() for s in range(3)} for m in ("essa", "grpo")}
            assert len(colours["essa"]) == len(colours["grpo"]) == 1 and colours["essa"] != colours["grpo"]
    finally:
        plt.close(fig)


def test_the_cli_refuses_a_bad_compare_config_before_any_compute():
    from typer.testing import CliRunner

    from cli.main import app

    bad = "methods=[{name: x, method: fgrpo, set: {grpo.gama: 1}}]"
    out = CliRunner().invoke(app, ["compare", str(REPO / "configs" / "compare-tiny.yaml"), "--set", bad])
    assert out.exit_code == 2 and "method 'x'" in out.output and "grpo.gama: unknown key" in out.output
    out = CliRunner().invoke(app, ["compare", str(REPO / "configs" / "nope.yaml")])
    assert out.exit_code == 2 and "compare config not found" in out.output


def test_a_paired_claim_counts_ties_apart_from_wins():
    from essaflow.compare.results import paired

    arms = [_arm("grpo", "GRPO", 0, 0.5, 0.75), _arm("grpo", "GRPO", 1, 0.5, 0.70),
            _arm("f", "F-GRPO(gamma=1)", 0, 0.5, 0.75), _arm("f", "F-GRPO(gamma=1)", 1, 0.5, 0.72)]  # fmt: skip
    p = paired(arms, "f", "grpo", "pass@16")
    assert (p.seeds_higher, p.seeds_equal, p.seeds) == (1, 1, 2) and "higher on 1/2 seeds, equal on 1" in p.sentence()
