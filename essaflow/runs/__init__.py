"""A pipeline run's lifecycle: its record, lease and heartbeat, crashed-run detection, resume, the nothing-new skip,
opening and closing it, the summary it reports, and the journal of its stages.
The stages themselves are in essaflow/stages/ (a comparison's runs: essaflow/compare/runs.py)."""
