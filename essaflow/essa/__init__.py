"""ESSA: gradient-free fine-tuning over SVD-LoRA singular values with CMA-ES (arXiv 2507.04453;
docs/algorithms.md sec. 2).

- `svd_lora.py`   the parameterisation: separate SVD of each LoRA factor, offsets to the top floor(alpha*r) values
- `strategy.py`   ask/tell search strategies: CMA-ES (full / separable, via `cmaes`) and plain Gaussian ES (Qiu)
- `population.py` candidate scoring: a Ray actor pool (or in process), bytes counted, dead workers survived
- `checkpoint.py` JSON + npz checkpoints (no pickle), atomic, manifest last
- `trainer.py`    the loop minibatch -> ask -> evaluate -> tell, metrics, held-out eval, checkpoint/resume
- `job.py`        the `essaflow essa` job: SFT start -> evaluate -> ESSA -> evaluate
"""
