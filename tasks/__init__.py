"""Prefect tasks: each wraps one library call with retries, caching, artifacts and logging. No algorithm code."""
