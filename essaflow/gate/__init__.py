"""The promotion gate: alias `champion` of a pipeline's registered model moves to a new version only on a paired win
over the current champion that noise cannot fake, both scored on the same problems under the same protocol.

- config.py      the `gate` section: the metric it promotes on and its rule's settings
- champion.py    the champion scored on this run's problems (its stored counts reused when the digests match)
- digests.py     what "the same problems under the same protocol" means
- paired.py      the paired test: per-problem differences and their bootstrap interval
- decision.py    the rule (docs/compare.md, "The promotion gate") and its verdict: promote or keep
- evidence.py    the verdict's evidence: tags, gate/evidence.json, the Prefect page
- promotion.py   the verdict applied in MLflow's model registry (aliases champion, challenger) and recorded
- version_tags.py the registered version's tags
- candidate.py   what a run registers and the gate's decision on it
- register.py    the pipeline's register step: decide, register, apply

Never imports prefect. This module imports nothing, so reading the config (config.py) stays cheap.
"""
