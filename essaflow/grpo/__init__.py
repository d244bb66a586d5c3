"""GRPO family (GRPO, DAPO, CISPO) with F-GRPO's focal weight (FGRPO-v2), distributed on Ray Train.

advantages.py  group-normalised advantages + focal weight, registry `register_advantage`
losses.py      policy losses, registry `register_loss`; KL and aggregation
rollout.py     prompts per step, batch-invariant sampling, rewards, log-probs
config.py      GRPOConfig
minibatch.py   the rows of each global mini-batch and micro-batch, their global counts, frozen log-probs
metrics.py     the step's sums, clocks and byte counters, and its global StepMetrics
comm.py        a worker's place in the DDP group and the bytes it all-reduces
loop.py        the step (rollout -> advantages -> loss -> optimiser step) and the loop one worker (rank) runs,
               with typed events to the driver
checkpoint.py  atomic checkpoints and exact resume
trainer.py     `train_grpo`: the driver, in-process or on Ray Train
distributed.py the Ray Train launch and the relay of rank 0's events
"""
