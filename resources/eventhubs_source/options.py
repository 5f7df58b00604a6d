"""The validated reader options of one read (:class:`ReadOptions`) and their spellings."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dagster_eventhub_ingest.resources.errors import ConfigurationError, RangeError, did_you_mean
from dagster_eventhub_ingest.resources.eventhubs_source.partition_range import (
    PartitionRange,
    parse_ranges,
)
from dagster_eventhub_ingest.resources.eventhubs_source.position import EventPosition
from dagster_eventhub_ingest.resources.eventhubs_source.progress import ProgressTarget
from dagster_eventhub_ingest.resources.limits import (
    DEFAULT_PREFETCH,
    DEFAULT_READERS_PER_PARTITION,
    DEFAULT_RECEIVE_TIMEOUT_SECONDS,
    MAX_PREFETCH,
    MAX_READERS_PER_PARTITION,
    ON_DATA_LOSS,
    OnDataLoss,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings

OPTION_NAMES = (
    "connection_string",
    "eventhub_name",
    "consumer_group",
    "fully_qualified_namespace",
    "credential_type",
    "credential_options",
    "ranges",
    "starting_position",
    "ending_position",
    "partition_ids",
    "receive_timeout",
    "prefetch",
    "max_readers_per_partition",
    "min_events_per_reader",
    "on_data_loss",
    "progress",
    "known_bounds",
    "read_stats",
)
# Spellings users bring from azure-event-hubs-spark or camelCase habits.
_OPTION_ALIASES = {
    "connectionstring": "connection_string",
    "hub": "eventhub_name",
    "eventhub": "eventhub_name",
    "eventhubname": "eventhub_name",
    "name": "eventhub_name",
    "consumergroup": "consumer_group",
    "fullyqualifiednamespace": "fully_qualified_namespace",
    "namespace": "fully_qualified_namespace",
    "credentialtype": "credential_type",
    "credentialoptions": "credential_options",
    "startingposition": "starting_position",
    "endingposition": "ending_position",
    "partitionids": "partition_ids",
    "receivetimeout": "receive_timeout",
    "maxreaderspartition": "max_readers_per_partition",
    "maxreadersperpartition": "max_readers_per_partition",
    "mineventsperreader": "min_events_per_reader",
    "ondataloss": "on_data_loss",
}


@dataclass(frozen=True)
class ReadOptions:
    """The validated options of one read; small, frozen and picklable.

    Either ``ranges`` (partition id -> inclusive range) or positions (defaults: ``earliest`` to
    ``latest``), optionally limited to ``partition_ids``.
    """

    settings: EventHubSettings
    ranges: tuple[PartitionRange, ...] | None = None
    starting_position: EventPosition = field(default_factory=lambda: EventPosition("earliest"))
    ending_position: EventPosition = field(default_factory=lambda: EventPosition("latest"))
    partition_ids: tuple[str, ...] | None = None
    receive_timeout: float = DEFAULT_RECEIVE_TIMEOUT_SECONDS
    prefetch: int = DEFAULT_PREFETCH
    max_readers_per_partition: int = DEFAULT_READERS_PER_PARTITION
    min_events_per_reader: int = 10_000
    on_data_loss: OnDataLoss = "fail"
    #: Where readers write their running counts
    #: (:mod:`dagster_eventhub_ingest.resources.eventhubs_source.progress`); set by the ingestion
    #: run, None for other reads. Holds the store's secret: not in ``repr``.
    progress: ProgressTarget | None = field(default=None, repr=False)
    #: What the caller just looked up of the ranges' partitions: partition id -> (first
    #: retained, last enqueued) sequence numbers. When it covers every range, the ranges are
    #: checked against it instead of asking the service again (the ingestion run passes its
    #: own look). A range that expired since is found by the readers (DataLossError).
    known_bounds: tuple[tuple[str, int, int], ...] | None = None
    #: The id of a classic driver's accumulator each reader adds what it read to
    #: (:mod:`dagster_eventhub_ingest.resources.eventhubs_source.stats`); set by the ingestion
    #: run, None for other reads.
    read_stats: int | None = None
    #: Options as the user spelled them, where that is not their name here (name -> as given):
    #: messages speak the user's words. Presentation only.
    spellings: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    #: What to set to read on past lost events, as the user would write it (a Kafka user reads
    #: ``failOnDataLoss=false``).
    data_loss_hint: str = field(default="on_data_loss='skip'", repr=False, compare=False)

    def spelled(self, name: str) -> str:
        """The option ``name`` as the user wrote it (its own name if not given otherwise)."""
        return dict(self.spellings).get(name, name)

    def __post_init__(self) -> None:
        if not (isinstance(self.receive_timeout, int | float) and self.receive_timeout > 0):
            raise ConfigurationError(
                f"receive_timeout: {self.receive_timeout!r} must be a number of seconds > 0"
            )
        if not (isinstance(self.prefetch, int) and 1 <= self.prefetch <= MAX_PREFETCH):
            raise ConfigurationError(
                f"prefetch: {self.prefetch!r} must be an integer 1..{MAX_PREFETCH}"
            )
        mr = self.max_readers_per_partition
        if not (isinstance(mr, int) and 1 <= mr <= MAX_READERS_PER_PARTITION):
            raise ConfigurationError(
                f"max_readers_per_partition: {mr!r} must be an integer "
                f"1..{MAX_READERS_PER_PARTITION} (Event Hubs allows {MAX_READERS_PER_PARTITION} "
                "readers per partition and consumer group)"
            )
        if not (isinstance(self.min_events_per_reader, int) and self.min_events_per_reader >= 1):
            raise ConfigurationError(
                f"min_events_per_reader: {self.min_events_per_reader!r} must be an integer >= 1"
            )
        if self.on_data_loss not in ON_DATA_LOSS:
            raise ConfigurationError(
                f"on_data_loss: {self.on_data_loss!r} is not valid; valid: "
                + ", ".join(repr(v) for v in ON_DATA_LOSS)
            )
        if self.ranges is not None:
            seen: set[str] = set()
            for rng in self.ranges:
                if rng.partition_id in seen:
                    raise RangeError(f"ranges: partition {rng.partition_id!r} given twice")
                seen.add(rng.partition_id)
            if self.partition_ids is not None:
                raise ConfigurationError(
                    "partition_ids: not allowed together with ranges (ranges already names "
                    "the partitions)"
                )

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ReadOptions:
        """Validate Spark reader options; every error names the option, its value, what's valid.

        Option keys are case-insensitive; an ``eventhubs.`` prefix and camelCase spellings are
        accepted. Secrets never appear in errors.
        """
        opts: dict[str, str] = {}
        spellings: dict[str, str] = {}
        for key, value in options.items():
            name = canonical_option(key)
            if name is None:
                raise ConfigurationError(
                    f"eventhubs source: unknown option {key!r}; "
                    + did_you_mean(key, own_spellings())
                    + "valid options: "
                    + ", ".join(OPTION_NAMES)
                )
            opts[name] = value
            if key != name:
                spellings[name] = key
        if "eventhub_name" not in opts and "connection_string" not in opts:
            raise ConfigurationError(
                "eventhub_name: required (the Event Hub to read), e.g. "
                ".option('eventhub_name', 'telemetry'), or a connection string with EntityPath"
            )
        # Without eventhub_name the connection string's EntityPath names the hub (the settings
        # read it with the SDK's parser, or say it is missing).
        settings_kwargs: dict[str, Any] = {"eventhub_name": opts.get("eventhub_name", "")}
        for name in ("consumer_group", "connection_string", "fully_qualified_namespace"):
            if name in opts:
                settings_kwargs[name] = opts[name]
        if "credential_type" in opts:
            settings_kwargs["credential_type"] = opts["credential_type"]
        elif "connection_string" not in opts and "fully_qualified_namespace" in opts:
            settings_kwargs["credential_type"] = "default_azure_credential"
        if "credential_options" in opts:
            # DefaultAzureCredential options
            # (dagster_eventhub_ingest.resources.config.IdentityOptions), as JSON.
            try:
                pairs = json.loads(opts["credential_options"])
                settings_kwargs["credential_options"] = tuple(
                    (str(k), v) for k, v in dict(pairs).items()
                )
            except (ValueError, TypeError):
                raise ConfigurationError(
                    f"credential_options: {opts['credential_options']!r} is not a JSON object "
                    "of DefaultAzureCredential options, e.g. "
                    '{"managed_identity_client_id": "<client id>"}'
                ) from None
        settings = EventHubSettings(**settings_kwargs)

        kwargs: dict[str, Any] = {"settings": settings, "spellings": tuple(spellings.items())}
        if "on_data_loss" in spellings:
            kwargs["data_loss_hint"] = f"{spellings['on_data_loss']}='skip'"
        if "ranges" in opts:
            if "starting_position" in opts or "ending_position" in opts:
                raise ConfigurationError(
                    "ranges: give either ranges or starting_position/ending_position, not both"
                )
            kwargs["ranges"] = parse_ranges(opts["ranges"])
        if "starting_position" in opts:
            kwargs["starting_position"] = EventPosition.parse(
                opts["starting_position"], "starting_position"
            )
        if "ending_position" in opts:
            kwargs["ending_position"] = EventPosition.parse(
                opts["ending_position"], "ending_position"
            )
        if "partition_ids" in opts:
            ids = tuple(p.strip() for p in opts["partition_ids"].split(",") if p.strip())
            if not ids:
                raise ConfigurationError(
                    f"partition_ids: {opts['partition_ids']!r} names no partition; give a "
                    "comma-separated list such as '0,1,2'"
                )
            kwargs["partition_ids"] = ids
        if "receive_timeout" in opts:
            kwargs["receive_timeout"] = _number(opts["receive_timeout"], "receive_timeout", float)
        for name in ("prefetch", "max_readers_per_partition", "min_events_per_reader"):
            if name in opts:
                kwargs[name] = _number(opts[name], name, int)
        if "on_data_loss" in opts:
            kwargs["on_data_loss"] = opts["on_data_loss"].strip().lower()
        if opts.get("progress"):
            kwargs["progress"] = ProgressTarget.from_option(opts["progress"])
        if "known_bounds" in opts:
            kwargs["known_bounds"] = _known_bounds(opts["known_bounds"])
        if opts.get("read_stats"):
            kwargs["read_stats"] = _number(opts["read_stats"], "read_stats", int)
        return cls(**kwargs)

    def to_options(self) -> dict[str, str]:
        """The Spark reader options that reproduce these options (holds the secret, if any)."""
        s = self.settings
        out: dict[str, str] = {
            "eventhub_name": s.eventhub_name,
            "consumer_group": s.consumer_group,
            "credential_type": s.credential_type,
            "receive_timeout": repr(float(self.receive_timeout)),
            "prefetch": str(self.prefetch),
            "max_readers_per_partition": str(self.max_readers_per_partition),
            "min_events_per_reader": str(self.min_events_per_reader),
            "on_data_loss": self.on_data_loss,
        }
        if s.connection_string:
            out["connection_string"] = s.connection_string
        if s.fully_qualified_namespace:
            out["fully_qualified_namespace"] = s.fully_qualified_namespace
        if s.credential_options:
            out["credential_options"] = json.dumps(dict(s.credential_options))
        if self.progress is not None:
            out["progress"] = self.progress.to_option()
        if self.read_stats is not None:
            out["read_stats"] = str(self.read_stats)
        if self.known_bounds is not None:
            out["known_bounds"] = json.dumps({p: [b, e] for p, b, e in self.known_bounds})
        if self.ranges is not None:
            out["ranges"] = json.dumps({r.partition_id: [r.start, r.end] for r in self.ranges})
        else:
            out["starting_position"] = str(self.starting_position)
            out["ending_position"] = str(self.ending_position)
            if self.partition_ids is not None:
                out["partition_ids"] = ",".join(self.partition_ids)
        return out


def camel_case(name: str) -> str:
    """``starting_position`` -> ``startingPosition``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def own_spellings() -> tuple[str, ...]:
    """The project's option names, also in camelCase (what a did-you-mean may offer)."""
    return OPTION_NAMES + tuple(camel_case(n) for n in OPTION_NAMES if "_" in n)


def canonical_option(key: str) -> str | None:
    low = key.strip().lower()
    if low.startswith("eventhubs."):
        low = low[len("eventhubs.") :]
    if low in OPTION_NAMES:
        return low
    return _OPTION_ALIASES.get(low.replace("_", "").replace("-", ""))


def _number(text: str, option: str, kind: type[int] | type[float]) -> Any:
    try:
        return kind(text.strip())
    except (TypeError, ValueError) as exc:
        what = "an integer" if kind is int else "a number"
        raise ConfigurationError(f"{option}: {text!r} is not {what}") from exc


def _known_bounds(raw: str) -> tuple[tuple[str, int, int], ...]:
    """``{"0": [first retained, last enqueued], ...}`` (the ``known_bounds`` option)."""
    try:
        doc = json.loads(raw)
        out = tuple((str(pid), int(b), int(e)) for pid, (b, e) in dict(doc).items())
    except (ValueError, TypeError):
        raise ConfigurationError(
            f"known_bounds: {raw!r} is not a JSON object of partition id -> [first retained, "
            'last enqueued] sequence numbers, e.g. {"0": [0, 99]}'
        ) from None
    return out
