"""Tracking: the MLflow server, one MLflow run per pipeline run, its metrics, the registered pyfunc model (the
promotion gate that moves its aliases is essaflow/gate/)."""

from essaflow.secrets import safe_uri, scrub  # noqa: F401  (what tracking masks, for its callers)
from essaflow.tracking.metrics import (  # noqa: F401
    log_comparison,
    log_eval,
    log_step_metrics,
    log_training_summary,
    logged_steps,
    metric_key,
)
from essaflow.tracking.registration import (  # noqa: F401
    EMBED_BASE_MAX_BYTES,
    PROMPT_FORMAT_SOURCE,
    PYFUNC_SOURCE,
    VersionRequest,
    download_registered,
    downloaded_version,
    fetch_version,
    find_version,
    log_adapter_model,
    register_version,
)
from essaflow.tracking.runs import (  # noqa: F401
    FAILURE_TAG,
    RUN_TAG,
    TrackedRun,
    fail_run,
    finish_run,
    flat_params,
    git_commit,
    run_status,
    set_tags,
    start_run,
    tracked,
)
from essaflow.tracking.server import (  # noqa: F401
    TrackingError,
    check_tracking,
    client,
    local_tracking_uri,
    resolve_tracking_uri,
)
