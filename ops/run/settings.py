"""What one run is given: its resolved settings, and a replay's ranges."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import ConfigDict, InstanceOf

from dagster_eventhub_ingest.resources.config import IngestConfig, OneLineErrors, PipelineConfig
from dagster_eventhub_ingest.resources.ranges import SeqRange
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = ["IngestSettings", "ReplaySettings"]


class IngestSettings(OneLineErrors, IngestConfig):
    """Everything one run needs: the three places' settings plus
    :class:`~dagster_eventhub_ingest.resources.config.IngestConfig`.

    How a run claims, reads and waits (strategy, bounds, timeouts, ...) is declared, described
    and validated once, in ``dagster_eventhub_ingest.resources.config.IngestConfig``; this adds
    the places' resolved settings and two internal knobs. The CLI builds it from its YAML
    (:meth:`from_config`), Dagster and Airflow from their resources and connections, tests and
    benchmarks directly::

        IngestSettings(eventhub=hub, store=store, sink=sink, strategy="greedy")

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
    def from_config(
        cls, config: PipelineConfig, env: Mapping[str, str] | None = None
    ) -> IngestSettings:
        """The settings of a loaded
        :class:`~dagster_eventhub_ingest.resources.config.PipelineConfig` (the CLI's file).

        Reads the credentials' environment variables now (``env``: default ``os.environ``).
        """
        return cls(
            eventhub=config.eventhub.settings(env),
            store=config.store.settings(env),
            sink=config.sink.settings(),
            **config.ingest_config().model_dump(),
        )


@dataclass(frozen=True)
class ReplaySettings:
    """Re-read a range into the sink without touching the live checkpoint.

    Either ``ranges`` (partition id -> inclusive ``(start_seq, end_seq)``) or a
    ``starting_position`` / ``ending_position`` (a sequence number, ``earliest``, ``latest`` or
    ``checkpoint``; defaults ``earliest`` .. ``latest``) applied to every target partition.
    """

    ranges: dict[str, SeqRange] | None = None
    starting_position: str | None = None
    ending_position: str | None = None
