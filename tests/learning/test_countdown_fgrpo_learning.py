"""A short F-GRPO run on the Countdown task raises held-out greedy accuracy over its SFT start (measured).

It starts from the preset's own SFT start, shipped in tests/learning/starts/ (tests/support/shipped_starts.py:
SFT differs between CPU models, and a short run's gain depends on its start), trains with three seeds, and is judged
by greedy decoding on the 256 held-out problems with the countdown verifier (deterministic, no sampling noise). It
asserts a mean gain of at least 2 points over the seeds and that no seed ends below the start.

Measured on 2 cores of an AMD EPYC (greedy, points of 256 problems, for grpo.seed 0 / 1 / 2): F-GRPO(gamma=0.5),
30 steps at lr 1e-3 (the preset: 300 at 3e-4), from the shipped start: 38.3% -> +6.6 / +3.1 / +5.9 (mean +5.2).
The same runs' held-out greedy gain every 10 steps: +3.5 / +1.6 / +3.1 at 10, +4.7 / +2.3 / +1.2 at 20, the figures
above at 30, +5.1 / +2.0 / +6.3 at 40 and +7.0 / +4.3 / +5.9 at 60 (mean +5.7: the earlier budget of 60 steps bought
little margin over the asserted 2 points for twice the training). 66 s of CPU for the test (98 s at 60 steps). From
a start trained on another AMD EPYC machine (also 38.3%), 60 steps gave +4.7 / +4.3 / +6.3.
"""

from __future__ import annotations

from statistics import mean

import pytest

from tests.support.greedy_gains import greedy_gains

# three seeds: about 75 s in the suite on a quiet machine; the explicit limit leaves room for a loaded one
pytestmark = [pytest.mark.learning, pytest.mark.timeout(1200)]
PRESET = "tiny-countdown-fgrpo.yaml"
FGRPO = ["grpo.steps=30", "grpo.lr=1e-3", "grpo.eval_every=0", "grpo.checkpoint_every=0", "data.eval_size=256"]


def test_fgrpo_raises_held_out_greedy_on_countdown(tmp_path):
    gains = greedy_gains(PRESET, FGRPO, tmp_path)
    assert mean(gains) >= 0.02, gains
    assert min(gains) >= 0, gains  # no seed makes the policy worse
