"""Judging: rewards (answer extraction and verification) and pass@k evaluation."""
