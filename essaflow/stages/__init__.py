"""The pipeline's stages as library calls, one module per stage as tasks/ names them (data, evaluation, training):
each reads its inputs from storage, computes through its stage's package (data/, judging/, training/), stores its
artifact and logs it to the run. The Prefect tasks wrap them with retries and caching; `essaflow essa|grpo` run the
same calls in one process (job.py). What the stages load in this process is loaded ahead while Prefect's server
starts (preload.py). Never imports prefect."""
