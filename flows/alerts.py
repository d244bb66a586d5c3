"""Alerts for the deployments: a Prefect automation that posts to a webhook when a deployed run fails or crashes.

`essaflow deploy --alert-webhook URL` (or ESSAFLOW_ALERT_WEBHOOK_URL) defines it beside the deployments:

- a webhook block (`CustomWebhookNotificationBlock` named `essaflow-alert`) that POSTs JSON
  `{"subject": ..., "text": ...}` to the URL (a private address such as a team's own relay is allowed);
- an automation `essaflow-run-failed`: on the event `prefect.flow-run.Failed` or `prefect.flow-run.Crashed` of a
  flow run tagged `essaflow` (every deployment in prefect.yaml carries that tag), send that block a message naming
  the flow run, its deployment, its state and its state message (the failure's JSON line for a finetune run).

Deploying again replaces both, so the URL can change. Prefect's server runs automations itself (its triggers and
actions services): nothing else needs to be running.
"""

from __future__ import annotations

from uuid import UUID

ALERT_AUTOMATION = "essaflow-run-failed"
ALERT_BLOCK = "essaflow-alert"
WEBHOOK_ENV = "ESSAFLOW_ALERT_WEBHOOK_URL"
ALERT_TAG = "essaflow"

SUBJECT = "essaflow: {{ flow_run.name }} ({{ deployment.name }}) {{ flow_run.state.name }}"
BODY = (
    "Flow run {{ flow_run.name }} ({{ flow_run.id }}) of deployment {{ deployment.name }} ended "
    "{{ flow_run.state.name }}: {{ flow_run.state.message }}"
)


def webhook_problem(url: str) -> str | None:
    """What is wrong with a webhook URL, as the words after it (None: an http(s) URL with a host); the URL is shown
    without its path, which may be the webhook's secret."""
    from urllib.parse import urlsplit

    text = url.strip()
    scheme, sep, rest = text.partition("://")
    host, slash, _path = (rest if sep else text).partition("/")
    shown = (f"{scheme}{sep}{host}" if sep else host) + ("/..." if slash else "")
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - parses the port: a ValueError names a bad one
    except ValueError as err:
        return f"{shown!r} is malformed ({err}): give the http(s):// URL to post to"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown!r} is not an http(s) URL with a host: give the http(s):// URL to post to"
    return None


def define_alerts(webhook_url: str, tag: str = ALERT_TAG) -> UUID:
    """Create (or replace) the webhook block and the failed-or-crashed automation; the automation's id."""
    from prefect.automations import Automation
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.client.orchestration import get_client
    from prefect.events.actions import SendNotification
    from prefect.events.schemas.automations import EventTrigger, Posture

    block = CustomWebhookNotificationBlock(
        name=ALERT_BLOCK,
        url=webhook_url,
        method="POST",
        json_data={"subject": "{{subject}}", "text": "{{body}}"},
        allow_private_urls=True,
    )
    block_id = block.save(ALERT_BLOCK, overwrite=True)
    with get_client(sync_client=True) as client:
        for old in client.read_automations_by_name(ALERT_AUTOMATION):
            client.delete_automation(old.id)
    automation = Automation(
        name=ALERT_AUTOMATION,
        description=f"Post to the {ALERT_BLOCK} webhook when a run tagged {tag!r} fails or crashes.",
        trigger=EventTrigger(
            expect={"prefect.flow-run.Failed", "prefect.flow-run.Crashed"},
            match={"prefect.resource.id": "prefect.flow-run.*"},
            match_related={"prefect.resource.role": "tag", "prefect.resource.id": f"prefect.tag.{tag}"},
            # one bucket per flow run: each run's failure is judged (and alerted) on its own
            for_each={"prefect.resource.id"},
            posture=Posture.Reactive,
            threshold=1,
        ),
        actions=[SendNotification(block_document_id=block_id, subject=SUBJECT, body=BODY)],
    ).create()
    return automation.id
