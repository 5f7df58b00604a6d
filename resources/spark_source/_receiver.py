"""A bounded pull over the SDK's callback-driven receive (executors, and the driver's probes)."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.errors import (
    EventHubIngestError,
    EventHubUnavailableError,
    redact,
)
from dagster_eventhub_ingest.resources.settings import EventHubSettings
from dagster_eventhub_ingest.resources.spark_source._amqp import (
    buffer_reads,
    fast_transfers,
    install_decoder,
    raw_transfers,
)
from dagster_eventhub_ingest.resources.spark_source._events import ColumnRows
from dagster_eventhub_ingest.resources.spark_source._message import _OFFSET, _SEQ, Event
from dagster_eventhub_ingest.resources.spark_source._values import text_of

if TYPE_CHECKING:
    from azure.eventhub import EventData

logger = logging.getLogger(__name__)


def _unavailable(settings: EventHubSettings, what: str, exc: BaseException) -> EventHubIngestError:
    return EventHubUnavailableError(
        f"Event Hub {settings.eventhub_name!r} (consumer group {settings.consumer_group!r}): "
        f"{what} failed: {type(exc).__name__}: {redact(str(exc))}"
    )


class _Done:
    """Sentinel: the receive thread ended."""


class _Closable:
    """``close()`` of both receivers: once, now or in a daemon thread."""

    _partition_id: str
    _closed: bool

    def _close_client(self) -> None:
        raise NotImplementedError

    def _stopping(self) -> None:
        """Called at once by ``close()``, before the client closes (now or in a thread)."""

    def close(self, *, wait: bool = True) -> None:
        """Stop receiving and close the client (idempotent).

        ``wait=False`` closes in a daemon thread: detaching the link (and a receive thread's
        exit) take 0.3-1 s that a reader which already has its whole range need not wait for
        (it is a task's tail, paid once per task otherwise).
        """
        if self._closed:
            return
        self._closed = True
        self._stopping()
        if wait:
            self._close_client()
        else:
            threading.Thread(
                target=self._close_client,
                name=f"eventhubs-close-{self._partition_id}",
                daemon=True,
            ).start()


class _BatchReceiver(_Closable):
    """Runs ``receive_batch`` in a thread and hands event lists over through a bounded queue.

    The SDK's receive is callback-driven and never returns on its own; a bounded read needs to
    stop at an exact sequence number and to yield from a generator, so the callback feeds a queue
    (a few batches deep: backpressure keeps a slow consumer from buffering the partition) and
    ``close()`` stops the client. An empty list means nothing arrived for ``wait_seconds``
    (measured here, between batches, including connection set-up).
    """

    def __init__(
        self,
        settings: EventHubSettings,
        partition_id: str,
        *,
        starting_position: int | str | datetime,
        prefetch: int,
        max_batch_size: int,
        wait_seconds: float,
        inclusive: bool = True,
    ) -> None:
        self._settings = settings
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)
        self._stop = threading.Event()
        self._closed = False
        self._client = settings.consumer_client()
        self._thread = threading.Thread(
            target=self._run,
            kwargs={
                "starting_position": starting_position,
                "prefetch": prefetch,
                "max_batch_size": max_batch_size,
                "inclusive": inclusive,
            },
            name=f"eventhubs-receive-{partition_id}",
            daemon=True,
        )

    def __enter__(self) -> _BatchReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def _run(self, **kwargs: Any) -> None:
        def on_batch(_ctx: Any, events: list[EventData]) -> None:
            if not self._stop.is_set():
                self._put(list(events))

        def on_error(_ctx: Any, exc: Exception) -> None:
            self._put(exc)
            self._stop.set()

        try:
            self._client.receive_batch(
                on_batch,
                partition_id=self._partition_id,
                starting_position=kwargs["starting_position"],
                starting_position_inclusive=kwargs["inclusive"],
                max_batch_size=kwargs["max_batch_size"],
                # No SDK wait: with one it holds a partial batch back until the wait is over
                # (the tail of every range would cost a full receive_timeout). The queue's
                # timeout in __iter__ detects silence instead.
                max_wait_time=None,
                prefetch=kwargs["prefetch"],
                on_error=on_error,
            )
        except Exception as exc:
            self._put(exc)
        finally:
            self._put(_Done())

    def __iter__(self) -> Iterator[list[EventData]]:
        while True:
            try:
                item = self._queue.get(timeout=self._wait)
            except queue.Empty:
                item = []
            if isinstance(item, _Done):
                if self._stop.is_set():
                    return
                raise EventHubUnavailableError(
                    f"Event Hub {self._settings.eventhub_name!r} partition "
                    f"{self._partition_id}: the receiver stopped unexpectedly"
                )
            if isinstance(item, BaseException):
                raise _unavailable(
                    self._settings, f"receiving from partition {self._partition_id}", item
                ) from item
            yield item

    def _stopping(self) -> None:
        self._stop.set()

    def _close_client(self) -> None:
        try:
            self._client.close()
        except Exception:  # closing a half-open AMQP link must not mask the real error
            logger.debug("closing the consumer of partition %s failed", self._partition_id)
        # The receive thread leaves its blocking read within one AMQP poll (<1 s).
        if self._thread.is_alive():
            self._thread.join(timeout=5)


class _PartitionPull(_Closable):
    """Pulls one partition's raw AMQP messages on the calling thread (the fast path).

    The SDK's public receive (:class:`_BatchReceiver`) runs an event processor in a thread,
    builds an ``EventData`` (and its ``AmqpAnnotatedMessage``) per event and hands lists over
    through a queue: a third of the SDK's CPU per event, and the two threads contend for the
    GIL. A bounded read needs none of it: this drives the SDK's own partition consumer
    (connection, CBS auth, link, credit and reconnects stay the SDK's) and yields its decoded
    messages as they are buffered, ``sequence number`` read from their annotations.

    The cuts of :mod:`._amqp` make pyamqp itself cheaper per event: the connection's socket
    reads are buffered (installed on each new connection, so after a reconnect too), and
    messages and performatives are decoded by equivalent, faster ``decode_payload`` and
    ``decode_frame``. With ``columns`` (the reader's) and the native step built on this host,
    runs of plain transfers arrive as
    :class:`~dagster_eventhub_ingest.resources.spark_source._events.ColumnRows` among the messages,
    in the order received.

    It stands on azure-eventhub internals (``_create_consumer``, the consumer's message buffer),
    so :func:`partition_pull_available` checks they are there and the reader falls back to
    :class:`_BatchReceiver` otherwise; each cut checks the pyamqp internals it needs and stays
    off without them (the pull works either way). A failed link is reopened at
    the next sequence number the caller has not seen (``max_retries`` times, the SDK's policy
    deciding what is retryable); an empty list means nothing arrived for ``wait_seconds``.
    """

    def __init__(
        self,
        settings: EventHubSettings,
        partition_id: str,
        *,
        starting_position: int | str | datetime,
        prefetch: int,
        wait_seconds: float,
        end: int | None = None,
        columns: bool = False,
        inclusive: bool = True,
    ) -> None:
        self._settings = settings
        self._columns = columns
        self._partition_id = partition_id
        self._wait = wait_seconds
        self._prefetch = prefetch
        # Where a reconnect resumes: the start until an event arrived, then the sequence number
        # after the last one seen (inclusive).
        self._next: int | str | datetime = starting_position
        self._inclusive = inclusive
        self._end = end
        self._client = settings.consumer_client()
        self._consumer = self._client._create_consumer(
            settings.consumer_group,
            partition_id,
            starting_position,
            on_event_received=_ignore,
            prefetch=prefetch,
            event_position_inclusive=inclusive,
        )
        self._closed = False
        install_decoder()

    def __enter__(self) -> _PartitionPull:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def sequence_number(message: Any) -> int | None:
        """The sequence number of a received message (an
        :class:`~dagster_eventhub_ingest.resources.spark_source._message.Event`, or a pyamqp
        message: its ``x-opt-sequence-number`` annotation), or of the last row of a native run
        (:class:`~dagster_eventhub_ingest.resources.spark_source._events.ColumnRows`)."""
        kind = type(message)
        if kind is Event:
            seq: int | None = message.seq
            return seq
        if kind is ColumnRows:
            return message.last_seq
        annotations = message.message_annotations
        return None if annotations is None else annotations.get(_SEQ)

    def __iter__(self) -> Iterator[list[Any]]:
        consumer = self._consumer
        buffer = consumer._message_buffer
        max_retries = self._client._config.max_retries
        retried = 0
        last = time.monotonic()
        while not self._closed:
            try:
                if consumer._open():
                    handler: Any = consumer._handler
                    # Once per link, socket and connection: a reconnect brings new ones.
                    raw_transfers(handler, consumer)
                    if buffer_reads(handler):
                        fast_transfers(handler, consumer, columns=self._columns)
                    handler.do_work(batch=self._frames(handler))
            except Exception as exc:
                if self._closed:
                    return
                if isinstance(exc, ImportError):
                    raise
                # As the SDK's own receive: a stolen link is final; otherwise reopen where the
                # caller is (inclusive), the SDK's policy deciding what can be retried.
                consumer._amqp_transport.check_link_stolen(consumer, exc)
                consumer._offset = self._next
                consumer._offset_inclusive = self._inclusive
                try:
                    last_exception = consumer._handle_exception(exc, is_consumer=True)
                except Exception as final:  # not retryable (the SDK raised it again)
                    raise _unavailable(
                        self._settings, f"receiving from partition {self._partition_id}", final
                    ) from final
                retried += 1
                if retried > max_retries:
                    raise _unavailable(
                        self._settings,
                        f"receiving from partition {self._partition_id}",
                        last_exception,
                    ) from last_exception
                continue
            if buffer:
                # One at a time: the SDK's keep-alive thread may append meanwhile (a copy and a
                # clear would drop what it appended between the two).
                take = buffer.popleft
                messages = [take() for _ in range(len(buffer))]
                seq = self.sequence_number(messages[-1])
                if seq is not None:
                    nxt = self._next
                    self._next = seq + 1 if not isinstance(nxt, int) else max(nxt, seq + 1)
                    self._inclusive = True
                retried = 0
                last = time.monotonic()
                yield messages
            elif time.monotonic() - last >= self._wait:
                last = time.monotonic()
                yield []

    def _frames(self, handler: Any) -> int:
        """How many frames the next listen asks for: no more than can arrive before it returns.

        pyamqp's listen reads up to that many frames and, when fewer come, waits one socket
        timeout (0.2 s; 1 s over WebSocket) for the rest. The SDK asks for a whole credit window
        each time, so a reader waited that long at the tail of every range the partition holds
        nothing after (the service sends what there is and no more), and whenever a listen
        spanned the end of a credit window (the next flow is sent only once it returns). So:
        the link's credit left (a full window when it is spent: the call flows first), and no
        more than the events the range still needs (``end``; a large event spans several
        frames, which only makes a listen return sooner).
        """
        link = getattr(handler, "_link", None)
        credit = getattr(link, "current_link_credit", None)
        frames = credit if isinstance(credit, int) and credit > 0 else self._prefetch
        if self._end is not None and isinstance(self._next, int):
            frames = min(frames, self._end - self._next + 1)
        return max(1, frames)

    def _close_client(self) -> None:
        try:
            self._consumer.close()
            self._client.close()
        except Exception:  # closing a half-open AMQP link must not mask the real error
            logger.debug("closing the consumer of partition %s failed", self._partition_id)


def first_event_at(
    settings: EventHubSettings,
    partition_id: str,
    position: int | str | datetime,
    *,
    inclusive: bool,
    wait_seconds: float,
) -> tuple[int, str] | None:
    """Sequence number and offset of the first event at ``position`` (a sequence number, an
    offset, an enqueued time), or None when none arrives within ``wait_seconds``.

    Received as a read receives (the pull, each message decoded from its bytes), so the event
    found there cannot fail the look-up, whatever it holds; the SDK's public receive where the
    pull cannot run.
    """
    if not partition_pull_available():
        receiver = _BatchReceiver(
            settings,
            partition_id,
            starting_position=position,
            prefetch=1,
            max_batch_size=1,
            wait_seconds=wait_seconds,
            inclusive=inclusive,
        )
        with receiver:
            for events in receiver:
                if not events:
                    return None
                seq = events[0].sequence_number
                if seq is not None:
                    return int(seq), str(events[0].offset)
        return None
    pull = _PartitionPull(
        settings,
        partition_id,
        starting_position=position,
        prefetch=1,
        wait_seconds=wait_seconds,
        inclusive=inclusive,
    )
    with pull:
        for messages in pull:
            if not messages:
                return None
            first = messages[0]
            seq = pull.sequence_number(first)
            if seq is None:
                continue
            if type(first) is Event:
                offset = first.offset
            else:
                raw = (first.message_annotations or {}).get(_OFFSET)
                offset = None if raw is None else text_of(raw)
            return seq, offset or ""
    return None


def _ignore(*_args: Any) -> None:
    """The consumer's event callback, never called: messages are taken from its buffer."""


def partition_pull_available() -> bool:
    """Whether this azure-eventhub has the internals :class:`_PartitionPull` drives.

    Off with ``EHINGEST_SDK_RECEIVE=1`` (the SDK's public receive, for comparison).
    """
    if os.environ.get("EHINGEST_SDK_RECEIVE") == "1":
        return False
    try:
        from azure.eventhub._consumer import EventHubConsumer
        from azure.eventhub._consumer_client import EventHubConsumerClient
    except ImportError:
        return False
    return hasattr(EventHubConsumerClient, "_create_consumer") and all(
        hasattr(EventHubConsumer, name) for name in ("_open", "_handle_exception")
    )
