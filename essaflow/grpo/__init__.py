"""GRPO family (GRPO, DAPO, CISPO) with F-GRPO's focal weight (FGRPO-v2), distributed on Ray Train.

advantages.py    group-normalised advantages + focal weight, registry `register_advantage`
losses.py        policy losses, registry `register_loss`; KL and aggregation
rollout.py       prompts per step, batch-invariant sampling, rewards, log-probs
config.py        GRPOConfig, and what it asks of a Ray cluster
batch_split.py   the rows of each global mini-batch and micro-batch, their global counts, frozen log-probs
metrics.py       the step's sums, clocks and byte counters, and its global StepMetrics
worker_group.py  a worker's place in the DDP group and the bytes it all-reduces
sharding.py      how ranks hold the weights: DDP replicas or FSDP2 shards
engine.py        the rank's vLLM engine for rollouts (sampling.backend=vllm)
learner.py       what one worker trains with: policy, optimiser, reference, engine
step.py          one rollout step: rollout -> advantages -> loss -> optimiser step
checkpoint.py    what a worker saves and restores: the trained policy (three forms), atomic checkpoints, exact resume
worker_io.py     what a worker is given and the typed events it tells the driver
loop.py          `train_grpo` and the loop one worker (rank) runs
distributed.py   the Ray driver: Ray Train launch and the relay of rank 0's events
"""
