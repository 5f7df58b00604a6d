"""How runs ingest (the run options), and the whole pipeline the CLI and defs.yaml declare."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args

from pydantic import ValidationError, field_validator, model_validator
from typing_extensions import Self

from dagster_eventhub_ingest.resources.config._model import (
    StrictModel,
    _above,
    _at_least,
    _quoted,
    _suggest,
    format_validation_error,
    setting,
)
from dagster_eventhub_ingest.resources.config._places import EventHubConfig, StoreConfig
from dagster_eventhub_ingest.resources.config._sink import SinkConfig
from dagster_eventhub_ingest.resources.errors import ConfigurationError
from dagster_eventhub_ingest.resources.limits import (
    DEFAULT_PREFETCH,
    DEFAULT_READERS_PER_PARTITION,
    DEFAULT_RECEIVE_TIMEOUT_SECONDS,
    MAX_PREFETCH,
    MAX_READERS_PER_PARTITION,
    ON_DATA_LOSS,
    OnDataLoss,
)

StrategyName = Literal["greedy", "balanced", "eph", "equal", "jump_hash", "delay_race"]
#: Balancing strategies (``dagster_eventhub_ingest.ops.balancing.STRATEGIES`` has the
#: implementations; a test keeps the two in step).
STRATEGY_NAMES: tuple[str, ...] = get_args(StrategyName)
OnCheckpointAhead = Literal["fail", "reset_to_earliest"]
ON_CHECKPOINT_AHEAD: tuple[str, ...] = get_args(OnCheckpointAhead)


class DelayRaceOptions(StrictModel):
    """Options of the ``delay_race`` strategy (``strategy_options``; docs/balancing.md)."""

    delay: float = setting(
        default=0.05, description="Seconds a contender waits per partition it holds (> 0)."
    )
    min_grab_time: float = setting(
        default=10.0,
        description="A holder's mark opens this many seconds after it last wrote it (> 0; keep "
        "it under half the lease expiry).",
    )
    lookahead: float = setting(
        default=10.0,
        description="Seconds an owner looks ahead for marks about to open: one polling "
        "interval (> 0).",
    )

    @field_validator("delay", "min_grab_time", "lookahead")
    @classmethod
    def _positive(cls, value: float) -> float:
        return _above(value, 0, " (seconds)")


#: Strategy name -> the model of its ``strategy_options`` (the others take none).
STRATEGY_OPTIONS: dict[str, type[StrictModel]] = {"delay_race": DelayRaceOptions}


def check_strategy_options(strategy: str, options: Mapping[str, Any]) -> None:
    """Raise :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` unless
    ``options`` suit ``strategy``.

    The one check of ``strategy_options``, at load and where a strategy is built.
    """
    if not options:
        return
    model = STRATEGY_OPTIONS.get(strategy)
    if model is None:
        takes = ", ".join(sorted(STRATEGY_OPTIONS))
        raise ConfigurationError(
            f"strategy_options: strategy {strategy!r} takes no options (got "
            f"{', '.join(sorted(map(str, options)))}); only {takes} does"
        )
    model.from_dict(options, where="strategy_options")


class IngestConfig(StrictModel):
    """The run options: how one run claims, reads and waits.

    The same keys in defs.yaml, the CLI's file and Airflow's ``options``; a run gets them as
    part of :class:`dagster_eventhub_ingest.ops.run.settings.IngestSettings`.
    """

    strategy: StrategyName = setting(
        default="balanced",
        description=f"Balancing strategy: {', '.join(STRATEGY_NAMES)} (docs/balancing.md).",
    )
    strategy_options: dict[str, Any] = setting(
        default_factory=dict,
        description="Options of the strategy; only delay_race takes any (delay, "
        "min_grab_time, lookahead: DelayRaceOptions).",
    )
    max_events_per_partition: int = setting(
        default=100_000, description="At most this many new events per partition per run (>= 1)."
    )
    max_events_per_cycle: int | None = setting(
        default=20_000,
        description="At most this many events per partition in one claim cycle (>= 1): a run "
        "checkpoints in batches of this size and releases its leases between them, so a "
        "concurrent run over the same partitions claims its share, and the landed count moves "
        "at each batch; a run alone (it claims every pending partition) grows its batches 4x, "
        "then 16x, after two cycles, and reads a lone pending partition (nobody could share "
        "it) at 64x from the first; a rest of at most a quarter batch is read with the batch "
        "before it. Unset reads a run's whole range in one cycle (one Spark job).",
    )
    lease_expiry_seconds: float = setting(
        default=60.0,
        description="A lease not renewed for this long (on the store's clock) may be taken over.",
    )
    on_data_loss: OnDataLoss = setting(
        default="fail",
        description="When events expired before being read: 'fail', or 'skip' (continue at the "
        "earliest retained event and report the gap).",
    )
    on_checkpoint_ahead: OnCheckpointAhead = setting(
        default="fail",
        description="A checkpoint the hub cannot have produced (past its last event, negative, "
        "or written for a hub since deleted and re-created): 'fail' (before anything is "
        "claimed), or 'reset_to_earliest' (move it back to just before the earliest retained "
        "event, drop its pending intent, record the reset in the report and the blobs' "
        "ehireset metadata). Opt in once, for the run that should reset.",
    )
    receive_timeout_seconds: float = setting(
        default=DEFAULT_RECEIVE_TIMEOUT_SECONDS,
        description="Event Hubs receive timeout per read, seconds (> 0).",
    )
    prefetch: int = setting(
        default=DEFAULT_PREFETCH, description=f"Events prefetched per receiver (1..{MAX_PREFETCH})."
    )
    max_readers_per_partition: int = setting(
        default=DEFAULT_READERS_PER_PARTITION,
        description="Spark input partitions (concurrent readers) per Event Hub partition range "
        f"(1..{MAX_READERS_PER_PARTITION}: Event Hubs allows {MAX_READERS_PER_PARTITION} per "
        "partition and consumer group).",
    )
    run_timeout_seconds: float | None = setting(
        default=None,
        description="Stop waiting for live peers after this long (the run then reports the "
        "partitions not up to date); unset waits while peers renew their leases.",
    )
    join_grace_seconds: float = setting(
        default=1.0,
        description="On its first cycle a run waits this long after its heartbeat so runs of one "
        "schedule tick see each other; 0 for a single owner.",
    )
    report_lag_seconds: bool = setting(
        default=True,
        description="Report how old the oldest unprocessed event of a lagging partition is.",
    )
    read_progress_seconds: float = setting(
        default=2.0,
        description="Live read progress: each Spark reader writes its running count to a small "
        "blob in the store at most this often (seconds), and the run shows events read of each "
        "range while Spark reads (0: off; a read shorter than this writes nothing).",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in STRATEGY_NAMES:
            raise ValueError(
                f"{value!r} is not valid; {_suggest(value, STRATEGY_NAMES)}valid: "
                f"{', '.join(STRATEGY_NAMES)}"
            )
        return value

    @model_validator(mode="after")
    def _strategy_options(self) -> Self:
        check_strategy_options(self.strategy, self.strategy_options)
        return self

    @field_validator("on_data_loss", mode="before")
    @classmethod
    def _on_data_loss(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ON_DATA_LOSS:
            raise ValueError(f"{value!r} is not valid; valid: {_quoted(ON_DATA_LOSS)}")
        return value

    @field_validator("on_checkpoint_ahead", mode="before")
    @classmethod
    def _on_checkpoint_ahead(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ON_CHECKPOINT_AHEAD:
            raise ValueError(f"{value!r} is not valid; valid: {_quoted(ON_CHECKPOINT_AHEAD)}")
        return value

    @field_validator("max_events_per_partition")
    @classmethod
    def _max_events(cls, value: int) -> int:
        return _at_least(value, 1, integer=True)

    @field_validator("max_events_per_cycle")
    @classmethod
    def _max_cycle(cls, value: int | None) -> int | None:
        return _at_least(value, 1, integer=True)

    @field_validator("lease_expiry_seconds")
    @classmethod
    def _lease(cls, value: float) -> float:
        return _above(value, 0, " (60 is typical)")

    @field_validator("receive_timeout_seconds")
    @classmethod
    def _receive(cls, value: float) -> float:
        return _above(value, 0, " (30 is typical)")

    @field_validator("prefetch")
    @classmethod
    def _prefetch(cls, value: int) -> int:
        if not 1 <= value <= MAX_PREFETCH:
            raise ValueError(f"{value!r} must be 1..{MAX_PREFETCH}")
        return value

    @field_validator("max_readers_per_partition")
    @classmethod
    def _readers(cls, value: int) -> int:
        if not 1 <= value <= MAX_READERS_PER_PARTITION:
            raise ValueError(
                f"{value!r} must be 1..{MAX_READERS_PER_PARTITION} (Event Hubs allows "
                f"{MAX_READERS_PER_PARTITION} readers per partition and consumer group)"
            )
        return value

    @field_validator("run_timeout_seconds")
    @classmethod
    def _timeout(cls, value: float | None) -> float | None:
        return _at_least(value, 0, " (0 gives up at once; unset waits while peers renew leases)")

    @field_validator("read_progress_seconds")
    @classmethod
    def _read_progress(cls, value: float) -> float:
        return _at_least(value, 0, " (2 is the default; 0 turns live read progress off)")

    @field_validator("join_grace_seconds")
    @classmethod
    def _grace(cls, value: float) -> float:
        return _at_least(value, 0, " (1 is the default; 0 for one owner)")

    def ingest_config(self) -> IngestConfig:
        """Just the run options (drops what a subclass adds: places, asset policies)."""
        return IngestConfig.model_validate(
            {name: getattr(self, name) for name in IngestConfig.model_fields}
        )

    def with_overrides(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` applied and validated (None leaves a value unchanged)."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        return self.replace(**changes) if changes else self

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` (``dataclasses.replace`` for these models)."""
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(changes)
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(format_validation_error(exc)) from None


class PipelineConfig(IngestConfig):
    """Everything one pipeline needs: where to read, where to keep state, where to write, how.

    The document the CLI reads (plus ``spark``) and the core of the Component's defs.yaml; a
    run gets its value as :class:`dagster_eventhub_ingest.ops.run.settings.IngestSettings`
    (``IngestSettings.from_config``).
    """

    eventhub: EventHubConfig = setting(description="The Event Hub to read.")
    store: StoreConfig = setting(description="The Blob container for leases and checkpoints.")
    sink: SinkConfig = setting(description="Where events land.")
