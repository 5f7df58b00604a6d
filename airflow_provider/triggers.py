"""``EventHubLagTrigger``: polls lag per partition on the triggerer, with the async SDK clients."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from dagster_eventhub_ingest.airflow_provider._connections import (
    DEFAULT_EVENTHUB_CONN_ID,
    DEFAULT_STORE_CONN_ID,
)
from dagster_eventhub_ingest.airflow_provider._lag import (
    alag_per_partition,
    condition_met,
    validate_thresholds,
)
from dagster_eventhub_ingest.resources.errors import (
    ConfigurationError,
    EventHubIngestError,
    RangeError,
)

__all__ = ["EventHubLagTrigger"]


class EventHubLagTrigger(BaseTrigger):
    """Fires once lag per partition meets the sensor's condition (see ``EventHubLagSensor``).

    It carries only connection ids and thresholds: the triggerer reads the connections itself
    (``BaseHook.aget_connection``), so no secret is ever stored with the trigger row. A
    configuration error, an unknown partition, or ``max_failures`` failed polls in a row end it
    with an ``error`` event; a transient failure before that is logged and polled again.

    Events: ``{"status": "success", "lag": {partition: events}}`` or
    ``{"status": "error", "kind": "configuration" | "unavailable", "message": ...}``.
    """

    def __init__(
        self,
        *,
        eventhub_conn_id: str = DEFAULT_EVENTHUB_CONN_ID,
        store_conn_id: str = DEFAULT_STORE_CONN_ID,
        store_container: str | None = None,
        partition_ids: list[str] | None = None,
        min_lag_events: int | None = None,
        max_lag_events: int | None = None,
        poll_interval: float = 30.0,
        max_failures: int = 5,
    ) -> None:
        super().__init__()
        validate_thresholds(min_lag_events, max_lag_events)
        self.eventhub_conn_id = eventhub_conn_id
        self.store_conn_id = store_conn_id
        self.store_container = store_container
        self.partition_ids = list(partition_ids) if partition_ids else None
        self.min_lag_events = min_lag_events
        self.max_lag_events = max_lag_events
        self.poll_interval = float(poll_interval)
        self.max_failures = int(max_failures)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Class path and keyword arguments (no secrets: connection ids only)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "eventhub_conn_id": self.eventhub_conn_id,
                "store_conn_id": self.store_conn_id,
                "store_container": self.store_container,
                "partition_ids": self.partition_ids,
                "min_lag_events": self.min_lag_events,
                "max_lag_events": self.max_lag_events,
                "poll_interval": self.poll_interval,
                "max_failures": self.max_failures,
            },
        )

    def _describe(self) -> str:
        if self.min_lag_events is not None:
            return f"some partition lag >= {self.min_lag_events}"
        return f"every partition lag <= {self.max_lag_events}"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll every ``poll_interval`` seconds until the condition holds."""
        from dagster_eventhub_ingest.airflow_provider.hooks import EventHubIngestHook

        hook = EventHubIngestHook(
            self.eventhub_conn_id, self.store_conn_id, store_container=self.store_container
        )
        try:
            eventhub, store = await hook.aget_lag_settings()
        except ConfigurationError as exc:
            yield TriggerEvent({"status": "error", "kind": "configuration", "message": str(exc)})
            return
        failures = 0
        while True:
            try:
                lag = await alag_per_partition(eventhub, store, self.partition_ids)
            except (ConfigurationError, RangeError) as exc:
                yield TriggerEvent(
                    {"status": "error", "kind": "configuration", "message": str(exc)}
                )
                return
            except EventHubIngestError as exc:
                failures += 1
                if failures >= self.max_failures:
                    yield TriggerEvent(
                        {
                            "status": "error",
                            "kind": "unavailable",
                            "message": f"{failures} lag polls failed in a row; last: "
                            f"{type(exc).__name__}: {exc}",
                        }
                    )
                    return
                self.log.warning(
                    "hub=%s consumer_group=%s: lag poll failed (%d of %d): %s",
                    eventhub.eventhub_name,
                    eventhub.consumer_group,
                    failures,
                    self.max_failures,
                    exc,
                )
            else:
                failures = 0
                if condition_met(lag, self.min_lag_events, self.max_lag_events):
                    self.log.info(
                        "hub=%s consumer_group=%s: %s holds: lag %s",
                        eventhub.eventhub_name,
                        eventhub.consumer_group,
                        self._describe(),
                        lag,
                    )
                    yield TriggerEvent({"status": "success", "lag": lag})
                    return
                self.log.info(
                    "hub=%s consumer_group=%s: waiting for %s; lag %s",
                    eventhub.eventhub_name,
                    eventhub.consumer_group,
                    self._describe(),
                    lag,
                )
            await asyncio.sleep(self.poll_interval)
