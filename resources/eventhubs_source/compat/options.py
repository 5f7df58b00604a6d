"""Options of azure-event-hubs-spark and Kafka habits, mapped onto the ``eventhubs`` source.

The azure-event-hubs-spark connector has no Spark 4 build; this module lets its reader code
(``spark.read.format("eventhubs").options(**ehConf)``) run unchanged on the project's Python data
source, and lets Kafka users keep ``startingOffsets`` / ``endingOffsets`` / ``failOnDataLoss``.
Everything here is parsing and planning on the driver; nothing runs on executors.

* :func:`parse_source_options` turns the raw reader options (ours, the connector's, Kafka's)
  into :class:`SourceOptions` without any I/O; an option that cannot be honoured is refused
  with a message naming what to use instead (:data:`.table.CONNECTOR_OPTIONS` is the full table).
* :mod:`.resolve` resolves the positions on the driver (batch plan, a stream's initial offsets).

Semantics follow the originals exactly: a connector or Kafka *start* is inclusive, an *end* is
exclusive (the first sequence number not read). See docs/spark_source.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from dagster_eventhub_ingest.resources.errors import ConfigurationError, did_you_mean
from dagster_eventhub_ingest.resources.eventhubs_source.compat.bounds import (
    Bound,
    PositionForm,
    PositionSpec,
    own_to_bound,
    parse_event_position,
    parse_kafka_offsets,
    parse_position_map,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.encryption import (
    plain_connection_string,
)
from dagster_eventhub_ingest.resources.eventhubs_source.compat.table import (
    CONNECTOR_OPTIONS,
    FOREIGN_OPTIONS,
    KAFKA_OPTIONS,
    RENAMES,
    accepted,
    accepted_options,
    documented,
)
from dagster_eventhub_ingest.resources.eventhubs_source.options import (
    OPTION_NAMES,
    ReadOptions,
    canonical_option,
)
from dagster_eventhub_ingest.resources.settings import entity_path

__all__ = ["SourceOptions", "parse_iso_duration", "parse_source_options"]


_DURATION = re.compile(
    r"^(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+(?:[.,]\d{0,9})?)S)?)?$",
    re.IGNORECASE,
)


def parse_iso_duration(text: str, option: str) -> float:
    """Seconds of an ISO-8601 duration as ``java.time.Duration.parse`` reads it (``PT1M30S``).

    A plain number is taken as seconds. The error names ``option``, the value and the format.
    """
    raw = text.strip()
    try:
        return float(raw)
    except ValueError:
        pass
    match = _DURATION.match(raw)
    if match is None or raw.upper().endswith("T") or raw.upper() in ("P", "-P", "+P"):
        raise ConfigurationError(
            f"{option}: {text!r} is not an ISO-8601 duration; expected e.g. 'PT60S', 'PT1M30S' "
            "or 'PT00H03M20S' (java.time.Duration format), or a number of seconds"
        )
    days = int(match["d"] or 0)
    hours = int(match["h"] or 0)
    minutes = int(match["m"] or 0)
    seconds = float((match["s"] or "0").replace(",", "."))
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return -total if match["sign"] == "-" else total


@dataclass(frozen=True)
class SourceOptions:
    """Validated options of one ``eventhubs`` read or stream; small, frozen and picklable.

    ``read`` carries the project's own options (hub, credentials, timeouts, data-loss policy and
    our own positions). ``starts`` / ``ends`` are set when positions came in the connector's or
    Kafka's form; they are resolved per partition with the connector's semantics.
    """

    read: ReadOptions
    starts: PositionSpec | None = None
    ends: PositionSpec | None = None
    has_own_start: bool = False
    max_events_per_trigger: int | None = None
    operation_timeout: float | None = None
    #: Options given that only a batch read can use (ends, ranges), as the user spelled them.
    batch_only: tuple[str, ...] = ()
    #: Options given that only a stream can use (maxEventsPerTrigger and its aliases), as spelled.
    stream_only: tuple[str, ...] = ()

    def batch_only_error(self) -> ConfigurationError | None:
        """The error a stream gives with batch-only options (an end, ranges), or None."""
        if not self.batch_only:
            return None
        return ConfigurationError(
            f"{', '.join(self.batch_only)}: a stream has no end; these options apply to "
            "spark.read only (use .trigger(availableNow=True) to stop at the events there "
            "are when the query starts)"
        )

    def stream_only_error(self) -> ConfigurationError | None:
        """The error a batch read gives with stream-only options, or None."""
        if not self.stream_only:
            return None
        return ConfigurationError(
            f"{', '.join(self.stream_only)}: bounds a stream's micro-batches; a batch read "
            "(spark.read) reads its whole range at once: remove it, or bound the read with an "
            "end position (or ranges)"
        )

    def stream_start(self) -> PositionSpec:
        """Where a new stream starts: the given positions, else the end of the stream.

        Both the connector and Kafka start a new stream at the end (new events only).
        """
        if self.starts is not None:
            return self.starts
        if self.has_own_start:
            return PositionSpec(own_to_bound(self.read.starting_position))
        return PositionSpec(Bound("latest"))


def _bool(text: str, option: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise ConfigurationError(f"{option}: {text!r} must be 'true' or 'false'")


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Validate reader options in any of the three dialects; no I/O.

    The project's own keys pass through to :meth:`ReadOptions.from_options`; the connector's
    and Kafka's keys are translated or refused (:data:`CONNECTOR_OPTIONS`, :data:`KAFKA_OPTIONS`).
    Secrets never appear in an error.
    """
    own: dict[str, str] = {}  # canonical name -> value
    given: dict[str, str] = {}  # canonical name -> the key as the user spelled it
    foreign: dict[str, tuple[str, str]] = {}  # lower-cased key -> (key as given, value)
    for key, value in options.items():
        low = key.strip().lower()
        if low in FOREIGN_OPTIONS:
            status, text = FOREIGN_OPTIONS[low]
            if status == "refused":
                raise ConfigurationError(
                    f"eventhubs source: option {key!r} is not supported: {text}"
                )
            foreign[low] = (key, value)
            continue
        name = canonical_option(key)
        if name is None:
            raise ConfigurationError(
                f"eventhubs source: unknown option {key!r}; {did_you_mean(key, accepted_options())}"
                f"valid options: {', '.join(OPTION_NAMES)}; the "
                f"connector's: {', '.join(accepted(CONNECTOR_OPTIONS))}; Kafka's: "
                f"{', '.join(accepted(KAFKA_OPTIONS))} (keys are case-insensitive)"
            )
        if name in own:
            raise ConfigurationError(f"{key}: also given as {given[name]!r}; give one of them")
        own[name] = value
        given[name] = key

    given_foreign = {low: key for low, (key, _) in foreign.items()}

    def put(name: str, key: str, value: str) -> None:
        if name in own:
            raise ConfigurationError(f"{key}: also given as {given[name]!r}; give one of them")
        own[name] = value
        given[name] = key

    for low, ours in RENAMES.items():
        got = foreign.pop(low, None)
        if got is not None:
            put(ours, *got)
    if "connection_string" in own:
        own["connection_string"] = plain_connection_string(
            own["connection_string"], given["connection_string"]
        )

    got = foreign.pop("eventhubs.receivertimeout", None)
    if got is not None:
        put("receive_timeout", got[0], repr(parse_iso_duration(got[1], got[0])))
    operation_timeout = None
    got = foreign.pop("eventhubs.operationtimeout", None)
    if got is not None:
        operation_timeout = parse_iso_duration(got[1], got[0])
        if operation_timeout <= 0:
            raise ConfigurationError(f"{got[0]}: {got[1]!r} must be a positive duration")
    got = foreign.pop("failondataloss", None)
    if got is not None:
        put("on_data_loss", got[0], "fail" if _bool(got[1], got[0]) else "skip")
        given.pop("on_data_loss")  # its spelling is Kafka's: the hint says failOnDataLoss
    limits = [
        foreign.pop(k)
        for k in ("maxeventspertrigger", "eventhubs.maxeventspertrigger", "maxoffsetspertrigger")
        if k in foreign
    ]
    stream_only = tuple(documented(key) for key, _ in limits)
    if len(limits) > 1:
        raise ConfigurationError(
            f"{', '.join(g[0] for g in limits)}: the same limit given twice; give one of them"
        )
    max_events = None
    if limits:
        key, text = limits[0]
        try:
            max_events = int(text.strip())
        except ValueError as exc:
            raise ConfigurationError(f"{key}: {text!r} is not an integer") from exc
        if max_events < 1:
            raise ConfigurationError(f"{key}: {max_events} must be >= 1 (events per micro-batch)")
    foreign.pop("eventhubs.dynamicpartitiondiscovery", None)  # always on (see the table)

    # Positions: ours (strings), the connector's (EventPosition JSON) or Kafka's.
    hub = own.get("eventhub_name")
    if hub is None and "connection_string" in own:
        # EntityPath names the hub (the SDK's parser; ReadOptions resolves it the same way).
        hub = entity_path(own["connection_string"])
    specs: dict[str, PositionSpec] = {}
    batch_only: list[str] = []
    dialect: set[PositionForm] = set()
    for side in ("starting", "ending"):
        own_name = f"{side}_position"
        forms: list[tuple[str, PositionSpec]] = []
        got = foreign.pop(f"eventhubs.{side}position", None)
        if got is not None:
            # The connector's key: its EventPosition JSON, or one of our own position strings.
            put(own_name, *got)
        if own_name in own and own[own_name].strip().startswith("{"):
            # eventhubs.startingPosition with the connector's JSON value.
            key = given.pop(own_name)
            forms.append((key, PositionSpec(default=parse_event_position(own.pop(own_name), key))))
        got = foreign.pop(f"eventhubs.{side}positions", None)
        if got is not None:
            per = parse_position_map(got[1], got[0], hub)
            forms.append((got[0], PositionSpec(per_partition=tuple(sorted(per.items())))))
        kafka = foreign.pop(f"{side}offsets", None)
        if kafka is not None:
            default, per = parse_kafka_offsets(kafka[1], kafka[0], hub, ending=side == "ending")
            if forms:
                raise ConfigurationError(
                    f"{kafka[0]} and {', '.join(k for k, _ in forms)}: give the {side} "
                    "positions in one form, Kafka's or the connector's"
                )
            forms.append((kafka[0], PositionSpec(default, tuple(sorted(per.items())))))
        if not forms:
            continue
        if side == "ending":
            batch_only.extend(documented(k) for k, _ in forms)
        clash = [given[n] for n in (own_name, "ranges", "partition_ids") if n in own]
        if clash:
            raise ConfigurationError(
                f"{', '.join(k for k, _ in forms)} and {', '.join(clash)}: give the {side} "
                "positions in one form (ranges and partition_ids go with the project's own "
                "positions only)"
            )
        default = next((s.default for _, s in forms if s.default is not None), None)
        per_partition: dict[str, Bound] = {}
        for _, s in forms:
            per_partition.update(dict(s.per_partition))
        form: PositionForm = "kafka" if kafka is not None else "connector"
        dialect.add(form)
        specs[side] = PositionSpec(
            default,
            tuple(sorted(per_partition.items())),
            option=", ".join(documented(k) for k, _ in forms),
            form=form,
        )
    assert not foreign, sorted(foreign)  # every accepted foreign key is consumed above
    batch_only += [documented(given[n]) for n in ("ranges", "ending_position") if n in own]
    if specs and ("ranges" in own or "partition_ids" in own):
        names = ", ".join(given[n] for n in ("ranges", "partition_ids") if n in own)
        raise ConfigurationError(
            f"{names}: not allowed together with the connector's or Kafka's positions"
        )
    has_own_start = "starting_position" in own
    read = ReadOptions.from_options(own)
    if "failondataloss" in given_foreign:
        hint = f"{documented(given_foreign['failondataloss'])}=false"
    elif "on_data_loss" in given:
        hint = f"{documented(given['on_data_loss'])}='skip'"
    elif dialect or any(k.startswith("eventhubs.") for k in given_foreign):
        hint = "failOnDataLoss=false"  # the connector's readers skip lost events; Kafka's way
    else:
        hint = read.data_loss_hint
    spellings = tuple((name, documented(key)) for name, key in given.items())
    read = replace(read, spellings=spellings, data_loss_hint=hint)
    return SourceOptions(
        read=read,
        starts=specs.get("starting"),
        ends=specs.get("ending"),
        has_own_start=has_own_start,
        max_events_per_trigger=max_events,
        operation_timeout=operation_timeout,
        batch_only=tuple(batch_only),
        stream_only=stream_only,
    )
