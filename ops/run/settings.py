"""What one run is given: its resolved settings, and a replay's ranges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, InstanceOf

from dagster_eventhub_ingest.resources.config import IngestSpec, OneLineErrors, RunOptions
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["IngestConfig", "ReplaySpec"]


class IngestConfig(OneLineErrors, RunOptions):
    """Everything one run needs: the three places plus
    :class:`~dagster_eventhub_ingest.resources.config.RunOptions`.

    The run options (strategy, bounds, timeouts, ...) are declared, described and validated
    once, in ``dagster_eventhub_ingest.resources.config.RunOptions``; this adds the resolved
    settings and two internal knobs. The CLI builds it from YAML (:meth:`from_spec`), Dagster from
    its resources, tests and benchmarks directly::

        IngestConfig(eventhub=hub, store=store, sink=sink, strategy="greedy")

    Bad values raise :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` naming
    the key.

    Attributes:
        poll_initial_seconds / poll_max_seconds: backoff while live peers hold partitions.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    eventhub: InstanceOf[EventHubSettings]
    store: InstanceOf[StoreSettings]
    sink: InstanceOf[SinkSettings]
    poll_initial_seconds: float = 0.2
    poll_max_seconds: float = 5.0

    @classmethod
    def from_spec(
        cls,
        spec: IngestSpec,
        env: Mapping[str, str] | None = None,
        *,
        connection_strings: Mapping[str, str] | None = None,
        **internals: Any,
    ) -> IngestConfig:
        """The config for a loaded :class:`~dagster_eventhub_ingest.resources.config.IngestSpec`
        (the CLI's file, Airflow's connections).

        Reads the credentials' environment variables now (``env``: default ``os.environ``);
        ``connection_strings`` (``"eventhub"`` / ``"store"``) are given ones instead.
        """
        given = connection_strings or {}
        return cls(
            eventhub=spec.eventhub.settings(env, connection_string=given.get("eventhub")),
            store=spec.store.settings(env, connection_string=given.get("store")),
            sink=spec.sink.settings(),
            **spec.run_options().model_dump(),
            **internals,
        )


@dataclass(frozen=True)
class ReplaySpec:
    """Re-read a range into the sink without touching the live checkpoint.

    Either ``ranges`` (partition id -> inclusive ``(start_seq, end_seq)``) or a
    ``starting_position`` / ``ending_position`` (a sequence number, ``earliest``, ``latest`` or
    ``checkpoint``; defaults ``earliest`` .. ``latest``) applied to every target partition.
    """

    ranges: dict[str, SeqRange] | None = None
    starting_position: str | None = None
    ending_position: str | None = None
