"""ESSA: gradient-free fine-tuning over SVD-LoRA singular values with CMA-ES (arXiv 2507.04453;
docs/algorithms.md sec. 2).

- `svd_lora.py`   the parameterisation: separate SVD of each LoRA factor, offsets to the top floor(alpha*r) values
- `strategy.py`   ask/tell search strategies: CMA-ES (full / separable, via `cmaes`) and plain Gaussian ES (Qiu)
- `scorer.py`     one candidate scorer: model + SVD bases loaded once, fitness by inference (black-box or gray-box)
- `population.py` the scorers as a Ray actor pool (seed or vector sync) or in process; bytes, dead workers
- `replica.py`    the strategy replica each Ray worker keeps in seed mode, and the driver's agreement check
- `minibatch.py`  the shared prompts of each generation
- `config.py`     ESSAConfig
- `checkpoint.py` JSON + npz checkpoints (no pickle), atomic, manifest last
- `step.py`       one generation, minibatch -> ask -> evaluate -> tell -> record: the step every search runs
- `trainer.py`    the loop over generations, held-out eval, checkpoint/resume
"""
