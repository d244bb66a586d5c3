"""Everything a config is checked for before compute, stage by stage; each problem one line naming the field (or
the variable, the file, the row) and the fix.

environment.py   the environment variables a run reads: numbers, the cache directory, S3 settings, MLflow's URI
machine.py       what this machine lacks for the config: a CUDA GPU, the vLLM engine (no torch imported)
model.py         the model: a loadable checkpoint, a GGUF file, a hub id that resolves, its fit to the data
data.py          the data: read in full as the run reads it, its fields' kinds, conflicting copies, the splits
reward.py        eval.reward: it imports, reads fields the data has, scores the data's reference answers
memory_plan.py   F-GRPO: each rank's estimated peak memory, from config.json alone
cluster.py       a Ray head that answers, and nodes that can hold the training workers
resume.py        a resume: the config equal to the run's own in every field its trajectory depends on
notes.py         a valid config that may not do what was meant (`note:` lines, the config still runs)
findings.py      what a check returns: problems and notes
preflight.py     what each command calls: check-config, `run`'s preflight, a run's first task, the jobs

Rules the config follows as it loads (a YAML key given twice, the name and service URIs) are
essaflow/config_rules.py, which the config's validators call; a checkpoint's weight files are read by
essaflow/model/weights_check.py, which the model loader calls too. No torch, vllm or MLflow is imported here.
"""
