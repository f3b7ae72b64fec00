"""What a notification carries: Alertmanager's webhook payload (version 4), or the list of
alerts Alertmanager's own ``POST /api/v2/alerts`` takes, from the node's alert states.

Labels and annotations are the ones the Prometheus rules give the same alert, so a receiver
routes and shows a node's alert as it would the rule's.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

WEBHOOK_VERSION = "4"
# A URL of this path is Alertmanager itself: it is sent the list its API takes.
ALERTMANAGER_API = "/api/v2/alerts"
# Alertmanager's API rejects an alert without endsAt after this long (its resolve_timeout):
# a firing alert is sent again well before, as Prometheus does.
RESEND_S = 60.0


@dataclass
class Alert:
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_at: float  # wall clock
    ends_at: float | None = None  # set when resolved
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return "resolved" if self.ends_at is not None else "firing"

    @property
    def fingerprint(self) -> str:
        text = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def rfc3339(wall: float) -> str:
    return datetime.fromtimestamp(wall, timezone.utc).isoformat().replace("+00:00", "Z")


def replay_hint(recording: str, wall: float) -> str:
    """The command that shows the node at ``wall`` in the recording being made."""
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
    return f'gpuwatch replay {recording} --from "{at}"'


def api_alert(alert: Alert) -> dict[str, Any]:
    """One alert as Alertmanager's API takes it (``postableAlert``)."""
    out: dict[str, Any] = {
        "labels": alert.labels,
        "annotations": alert.annotations,
        "startsAt": rfc3339(alert.starts_at),
    }
    if alert.ends_at is not None:
        out["endsAt"] = rfc3339(alert.ends_at)
    return out


def webhook(alerts: list[Alert], receiver: str = "gpuwatch") -> dict[str, Any]:
    """Alertmanager's webhook payload, version 4, for one group of alerts."""
    common_labels = _common([a.labels for a in alerts])
    common_annotations = _common([a.annotations for a in alerts])
    group = {k: v for k, v in common_labels.items() if k == "alertname"}
    firing = any(a.status == "firing" for a in alerts)
    return {
        "version": WEBHOOK_VERSION,
        "groupKey": "{}:" + "{" + ",".join(f'{k}="{v}"' for k, v in group.items()) + "}",
        "truncatedAlerts": 0,
        "status": "firing" if firing else "resolved",
        "receiver": receiver,
        "groupLabels": group,
        "commonLabels": common_labels,
        "commonAnnotations": common_annotations,
        "externalURL": "",
        "alerts": [
            {
                "status": a.status,
                "labels": a.labels,
                "annotations": a.annotations,
                "startsAt": rfc3339(a.starts_at),
                # Alertmanager writes the zero time for an alert that has not ended.
                "endsAt": rfc3339(a.ends_at) if a.ends_at is not None else "0001-01-01T00:00:00Z",
                "generatorURL": "",
                "fingerprint": a.fingerprint,
            }
            for a in alerts
        ],
    }


def is_api(url: str) -> bool:
    return url.rstrip("/").endswith(ALERTMANAGER_API)


def body_for(url: str, alerts: list[Alert]) -> Any:
    """What ``url`` is sent: Alertmanager's API list, or the webhook payload."""
    if is_api(url):
        return [api_alert(a) for a in alerts]
    return webhook(alerts)


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}
