"""Splits by threshold on each problem's own key: growing data, duplicates under other ids, the eval_size cap."""

from essaflow.data import Problem, split_problems
from essaflow.data.splits import key_points
from essaflow.data.synthetic import synthetic_problems


def _where(splits) -> dict[str, str]:
    return {p.problem_key(): name for name in ("sft", "train", "eval") for p in getattr(splits, name)}


def test_growing_the_source_moves_no_problem_into_or_out_of_training():
    small, grown = synthetic_problems(3000), synthetic_problems(4000)
    assert grown[:3000] == small  # the same generator: the first 3,000 problems, then 1,000 new ones
    before = split_problems(small, eval_size=256, sft_fraction=0.4)
    after = split_problems(grown, eval_size=256, sft_fraction=0.4)
    was, now = _where(before), _where(after)
    trained_now = {k for k, s in now.items() if s in ("sft", "train")}
    held_out_before = {p.problem_key() for p in small if key_points(p)[0] < 0.1}
    assert not held_out_before & trained_now  # no held-out problem (evaluated or past the cap) is trained on
    for key, split in was.items():
        if split in ("sft", "train"):
            assert now[key] == split  # a training problem stays in its split
    old_eval = {k for k, s in was.items() if s == "eval"}
    kept = {k for k in old_eval if now.get(k) == "eval"}
    assert len(before.eval) == len(after.eval) == 256
    # new problems with smaller keys take part of the cap; the rest of the old eval set is still evaluated
    assert 180 <= len(kept) < 256 and after.held_out_unused > before.held_out_unused
    print(f"eval problems kept {len(kept)}/256, moved to training 0, past the cap {256 - len(kept)}")


def test_a_split_is_the_same_whatever_else_the_source_holds():
    problems = synthetic_problems(600, seed=3)
    whole = _where(split_problems(problems, eval_size=20, sft_fraction=0.4))
    half = _where(split_problems(problems[::2], eval_size=20, sft_fraction=0.4))
    assert all(whole[k] == s for k, s in half.items() if s != "eval")


def test_duplicates_under_different_ids_share_one_split():
    same = [Problem(id=f"dup-{i}", prompt="What is 2+2?", answer="4") for i in range(10)]
    spread = [Problem(id=f"p{i}", prompt=f"{i}+{i}=", answer=str(2 * i)) for i in range(300)]
    splits = split_problems(same + spread, eval_size=16, sft_fraction=0.4)
    homes = {name for name in ("sft", "train", "eval") for p in getattr(splits, name) if p.id.startswith("dup-")}
    assert len(homes) <= 1
    # and copies of 60 problems under new ids, their whitespace changed, land where their originals do
    copies = [Problem(id=f"copy-{p.id}", prompt=f" {p.prompt} ", answer=p.answer) for p in spread[:60]]
    both = split_problems(spread + copies, 16, 0.4)
    by_id = {p.id: name for name in ("sft", "train", "eval") for p in getattr(both, name)}
    assert all(by_id.get(f"copy-{p.id}") == by_id.get(p.id) for p in spread[:60])


def test_eval_size_caps_the_held_out_set_with_the_smallest_keys():
    problems = synthetic_problems(2000, seed=5)
    region = sorted((p for p in problems if key_points(p)[0] < 0.1), key=lambda p: p.problem_key())
    splits = split_problems(problems, eval_size=64, sft_fraction=0.4)
    assert [p.problem_key() for p in splits.eval] == [p.problem_key() for p in region[:64]]
    assert splits.held_out_unused == len(region) - 64
    assert len(splits.sft) + len(splits.train) == len(problems) - len(region)
    wider = split_problems(problems, eval_size=64, sft_fraction=0.4, eval_fraction=0.2)
    assert {p.id for p in wider.train} < {p.id for p in splits.train} | {p.id for p in splits.sft}


def test_a_held_out_source_replaces_the_region_and_its_problems_leave_training():
    training = [Problem(id=f"t{i}", prompt=f"q{i}", answer=str(i)) for i in range(100)]
    held_out = [Problem(id=f"e{i}", prompt=f"q{i}" if i < 10 else f"other {i}", answer=str(i)) for i in range(30)]
    splits = split_problems(training, eval_size=30, sft_fraction=0.4, eval_problems=held_out)
    assert {p.id for p in splits.eval} == {p.id for p in held_out}
    trained = {p.prompt for p in splits.sft + splits.train}
    assert len(trained) == 90 and not trained & {p.prompt for p in held_out}
    assert splits.eval_overlap_dropped == 10 and splits.held_out_unused == 0


def test_below_the_cap_the_grown_eval_set_holds_every_old_eval_problem():
    small, grown = synthetic_problems(3000), synthetic_problems(4000)
    before = split_problems(small, eval_size=256, sft_fraction=0.4, eval_fraction=0.05)
    after = split_problems(grown, eval_size=256, sft_fraction=0.4, eval_fraction=0.05)
    assert before.held_out_unused == after.held_out_unused == 0  # 0.05 x 4,000 problems stays under the cap
    old, new = {p.problem_key() for p in before.eval}, {p.problem_key() for p in after.eval}
    assert old < new and len(new) - len(old) > 20
    print(f"eval {len(old)} -> {len(new)} problems, all {len(old)} old ones kept")
