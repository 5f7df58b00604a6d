"""What the service says about a hub's partitions (management calls, driver and executors)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from resources.errors import EventHubIngestError, EventHubUnavailableError, redact
from resources.settings import EventHubSettings

if TYPE_CHECKING:
    from azure.eventhub import EventHubConsumerClient


@dataclass(frozen=True)
class PartitionInfo:
    """What ``get_partition_properties`` says about one partition (no secrets)."""

    partition_id: str
    begin_sequence_number: int
    last_enqueued_sequence_number: int
    last_enqueued_offset: str
    last_enqueued_time: datetime | None
    is_empty: bool

    @property
    def first_available(self) -> int:
        """The first sequence number still readable (``last + 1`` when nothing is retained)."""
        if self.is_empty:
            return self.last_enqueued_sequence_number + 1
        return self.begin_sequence_number


def _unavailable(settings: EventHubSettings, what: str, exc: BaseException) -> EventHubIngestError:
    return EventHubUnavailableError(
        f"Event Hub {settings.eventhub_name!r} (consumer group {settings.consumer_group!r}): "
        f"{what} failed: {type(exc).__name__}: {redact(str(exc))}"
    )


def _partition_info(pid: str, props: Mapping[str, Any]) -> PartitionInfo:
    return PartitionInfo(
        partition_id=pid,
        begin_sequence_number=int(props["beginning_sequence_number"]),
        last_enqueued_sequence_number=int(props["last_enqueued_sequence_number"]),
        last_enqueued_offset=str(props["last_enqueued_offset"]),
        last_enqueued_time=props.get("last_enqueued_time_utc"),
        is_empty=bool(props["is_empty"]),
    )


def fetch_partition_info(
    settings: EventHubSettings,
    partition_ids: Sequence[str] | None = None,
    *,
    client: EventHubConsumerClient | None = None,
) -> tuple[list[str], dict[str, PartitionInfo]]:
    """Return the hub's partition ids and the properties of ``partition_ids`` (default: all).

    Every management call of the SDK opens its own AMQP connection with its own CBS handshake
    (0.5-1.5 s, mostly the SDK's 50 ms polls per handshake frame), so the calls run
    concurrently on one client: with ``partition_ids`` given, the id listing and every
    partition's properties are one round trip; without, two (ids, then properties).
    Properties of ids that turn out not to exist are left out (callers name them).
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    own = client is None
    cl = client if client is not None else settings.consumer_client()
    wanted = list(dict.fromkeys(partition_ids)) if partition_ids is not None else None
    pool = ThreadPoolExecutor(
        max_workers=min(16, 1 + len(wanted or ())), thread_name_prefix="eventhubs-mgmt"
    )
    wait = True
    try:

        def props(pid: str) -> PartitionInfo:
            return _partition_info(pid, cl.get_partition_properties(pid))

        ids_future = pool.submit(cl.get_partition_ids)
        futures: dict[str, Future[PartitionInfo]] = {}
        if wanted is not None:
            futures = {pid: pool.submit(props, pid) for pid in wanted}
        try:
            all_ids = [str(p) for p in ids_future.result()]
        except Exception as exc:
            wait = False
            raise _unavailable(settings, "reading the partition ids", exc) from exc
        if wanted is None:
            wanted = all_ids
            futures = {pid: pool.submit(props, pid) for pid in wanted}
        elif any(pid not in all_ids for pid in wanted):
            # The properties call of an unknown id may be retrying; nobody needs its answer.
            wait = False
        infos: dict[str, PartitionInfo] = {}
        for pid, future in futures.items():
            if pid not in all_ids:
                continue
            try:
                infos[pid] = future.result()
            except Exception as exc:
                wait = False
                raise _unavailable(settings, f"properties of partition {pid}", exc) from exc
        return all_ids, infos
    finally:
        pool.shutdown(wait=wait, cancel_futures=not wait)
        if own:
            cl.close()
