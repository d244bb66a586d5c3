"""GRPO family (GRPO, DAPO, CISPO) with F-GRPO's focal weight (FGRPO-v2), distributed on Ray Train.

advantages.py  group-normalised advantages + focal weight, registry `register_advantage`
losses.py      policy losses, registry `register_loss`; KL and aggregation
rollout.py     prompts per step, batch-invariant sampling, rewards, log-probs
checkpoint.py  atomic checkpoints and exact resume
trainer.py     the training loop (one worker) and `train_grpo` (in-process or Ray Train DDP)
job.py         `essaflow grpo`: SFT start -> eval -> train -> eval
"""
