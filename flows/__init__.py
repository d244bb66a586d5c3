"""Prefect flows: the pipelines a user triggers from the UI, a schedule or the CLI."""
