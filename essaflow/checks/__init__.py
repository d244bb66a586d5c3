"""What a config is checked for beyond its fields' values, before any compute: a key given twice in its YAML, a
name and service URIs the services would refuse, what this machine lacks (a GPU, vllm), and notes on a valid
config that may not do what was meant. No torch, vllm or MLflow is imported here."""
