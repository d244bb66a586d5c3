"""ESSA: gradient-free fine-tuning over SVD-LoRA singular values with CMA-ES (arXiv 2507.04453;
docs/algorithms.md sec. 2).

- `svd_lora.py`        the parameterisation: separate SVD of each LoRA factor, offsets to the top floor(alpha*r) values
- `strategy.py`        ask/tell search strategies: CMA-ES (full / separable, via `cmaes`) and plain Gaussian ES (Qiu)
- `prompt_sampler.py`  the shared prompts of each generation and its sampling seed
- `config.py`          ESSAConfig, and what it asks of a Ray cluster
- `scoring_spec.py`    what every scorer loads once (ScoringSpec), read from the run's config
- `fitness.py`         the fitness kinds: black-box accuracy, gray-box answer probability / log-probability
- `engine.py`          offsets -> fitness on each engine: transformers (merged or on the LoRA path), vLLM batches
- `scorer.py`          one candidate scorer: model + SVD bases loaded once, the driver's calls answered
- `replica.py`         seed mode: the strategy replica each Ray worker keeps and scores from, the driver's check
- `population.py`      the in-process population
- `ray_pool.py`        the scorers as Ray actors in a placement group: start, restarts of dead workers, close
- `handout.py`         a generation's work over the live workers, a dead worker's work re-dispatched
- `population_seed.py` seed sync on the pool: each worker draws its share from a replica (`replica.py`)
- `population_vectors.py` vector sync on the pool: each call carries one candidate's offsets
- `distributed.py`     the Ray driver: the population of essa.sync on a fresh pool
- `metrics.py`         what a generation cost (bytes, tokens, device time, lost work) and its metrics row
- `step.py`            one generation, minibatch -> ask -> evaluate -> tell -> record: the step every search runs
- `checkpoint.py`      what a search saves and restores: JSON + npz checkpoints (no pickle), atomic, manifest last
- `loop.py`            `train_essa`: the loop over generations, held-out eval, checkpoint/resume
"""
