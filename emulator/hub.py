"""Event storage of the emulator: hubs, partitions, retention and optional persistence.

Each stored event is encoded once, at enqueue time, as the exact AMQP message bytes a receiver
gets (header, message annotations with ``x-opt-sequence-number``/``x-opt-offset``/
``x-opt-enqueued-time``/``x-opt-partition-key``, then the producer's properties, application
properties and body copied verbatim). Delivering an event is then a slice and a write.

Offsets are byte positions in the partition (like the service's), sequence numbers start at 0,
enqueued times are milliseconds since the epoch and never go backwards within a partition.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
import struct
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from dagster_eventhub_ingest.emulator.partition_key import partition_for_key
from dagster_eventhub_ingest.resources.amqp.codec import (
    Symbol,
    Timestamp,
    decode,
    encode,
    encode_into,
    skip,
    split_list,
)

__all__ = [
    "DEFAULT_CONSUMER_GROUP",
    "EmulatorError",
    "Hub",
    "Namespace",
    "Partition",
    "StoredEvent",
    "build_stored_payload",
    "partition_for_key",
]

logger = logging.getLogger(__name__)

DEFAULT_CONSUMER_GROUP = "$Default"
_HUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}[A-Za-z0-9]$|^[A-Za-z0-9]$")
_CG_NAME = re.compile(r"^(\$Default|[A-Za-z0-9][A-Za-z0-9._-]{0,48}[A-Za-z0-9]|[A-Za-z0-9])$")

# Annotation keys the service owns; a producer's values for them are replaced on enqueue.
_SERVICE_KEYS = {
    b"x-opt-sequence-number",
    b"x-opt-offset",
    b"x-opt-enqueued-time",
    b"x-opt-partition-key",
}


class EmulatorError(ValueError):
    """Raised for an invalid emulator request (bad hub name, unknown hub); the message says why."""


class StoredEvent:
    """One enqueued event and its pre-encoded message (``payload[:split]`` is the header)."""

    __slots__ = ("enqueued_ms", "offset", "partition_key", "payload", "seq", "split")

    def __init__(
        self,
        seq: int,
        offset: int,
        enqueued_ms: int,
        partition_key: str | None,
        payload: bytes,
        split: int,
    ) -> None:
        self.seq = seq
        self.offset = offset
        self.enqueued_ms = enqueued_ms
        self.partition_key = partition_key
        self.payload = payload
        self.split = split


def build_stored_payload(
    message: bytes, seq: int, offset: int, enqueued_ms: int, partition_key: str | None
) -> tuple[bytes, int, str | None]:
    """Encode ``message`` as delivered: service annotations added, other sections kept verbatim.

    Returns ``(payload, split, partition_key)`` where ``payload[:split]`` is the header section
    (delivery annotations, the producer's if any, start right after it) and ``partition_key``
    is the key actually stored (``partition_key`` if given, else the message's own
    ``x-opt-partition-key``).
    """
    head = delivery = b""
    tail: list[bytes] = []
    pairs: list[bytes] = []
    count = 0
    for code, start, end, value_pos in _sections(message):
        if code == 0x70:
            head = message[start:end]
        elif code == 0x71:
            delivery = message[start:end]  # the producer's delivery annotations: kept
        elif code == 0x72:
            # Copy the producer's annotations byte for byte, except the service-owned keys.
            spans, _ = split_list(message, value_pos)
            for i in range(0, len(spans) - 1, 2):
                ks, ke = spans[i]
                key_bytes = message[ks + 2 : ke] if message[ks] in (0xA3, 0xA1) else b""
                if key_bytes == b"x-opt-partition-key" and partition_key is None:
                    val, _ = decode(message, spans[i + 1][0])
                    if isinstance(val, (str, bytes)) and val:
                        partition_key = val.decode() if isinstance(val, bytes) else str(val)
                if key_bytes in _SERVICE_KEYS:
                    continue
                pairs.append(message[ks : spans[i + 1][1]])
                count += 2
        else:
            tail.append(message[start:end])
    offset_text = str(offset).encode()
    pairs.append(
        _FIXED_ANNOTATIONS.pack(_SEQ_KEY, 0x81, seq, _OFFSET_KEY, 0xA1, len(offset_text))
        + offset_text
        + _ENQ_PACK.pack(_ENQ_KEY, 0x83, enqueued_ms)
    )
    count += 6
    if partition_key is not None:
        pairs.append(_PKEY_KEY)
        key_out = bytearray()
        encode_into(key_out, partition_key)
        pairs.append(bytes(key_out))
        count += 2
    body = b"".join(pairs)
    if len(body) + 1 < 256 and count < 256:
        annotations = b"\x00\x53\x72\xc1" + bytes((len(body) + 1, count)) + body
    else:
        annotations = b"\x00\x53\x72" + struct.pack(">BII", 0xD1, len(body) + 4, count) + body
    tail.insert(0, annotations)
    if delivery:
        tail.insert(0, delivery)
    tail.insert(0, head)
    return b"".join(tail), len(head), partition_key


def _sections(message: bytes) -> list[tuple[int, int, int, int]]:
    """``(code, start, end, value position)`` of each section (descriptor fast path)."""
    out = []
    pos, n = 0, len(message)
    while pos < n:
        if message[pos] != 0x00:
            raise ValueError(f"message section at {pos} is not a described value")
        if message[pos + 1] == 0x53:
            code, value_pos = message[pos + 2], pos + 3
        else:
            descriptor, value_pos = decode(message, pos + 1)
            code = int(descriptor) if isinstance(descriptor, int) else -1
        end = skip(message, value_pos)
        out.append((code, pos, end, value_pos))
        pos = end
    return out


_SEQ_KEY = encode(Symbol("x-opt-sequence-number"))
_OFFSET_KEY = encode(Symbol("x-opt-offset"))
_ENQ_KEY = encode(Symbol("x-opt-enqueued-time"))
_PKEY_KEY = encode(Symbol("x-opt-partition-key"))
# key, long(0x81, q), key, str8(0xa1, len) -- the offset text follows
_FIXED_ANNOTATIONS = struct.Struct(f">{len(_SEQ_KEY)}sBq{len(_OFFSET_KEY)}sBB")
_ENQ_PACK = struct.Struct(f">{len(_ENQ_KEY)}sBq")


class Partition:
    """One partition: an append-only, retention-trimmed list of :class:`StoredEvent`."""

    def __init__(self, hub: Hub, partition_id: str) -> None:
        self.hub = hub
        self.id = partition_id
        self.events: list[StoredEvent] = []
        self.first = 0  # index of the first event still within retention
        self.next_seq = 0
        self.next_offset = 0
        self.last_offset = -1
        self.last_enqueued_ms = 0
        self.listeners: set[Callable[[], None]] = set()
        self._log: BinaryIO | None = None

    # -- reading ------------------------------------------------------------------------------

    def prune(self, now_ms: int | None = None) -> None:
        """Drop events older than the hub's retention from the readable range."""
        retention = self.hub.retention_seconds
        if retention is None:
            return
        cutoff = (now_ms if now_ms is not None else _now_ms()) - int(retention * 1000)
        events, first = self.events, self.first
        while first < len(events) and events[first].enqueued_ms < cutoff:
            first += 1
        if first > 1024 and first * 2 > len(events):
            del events[:first]  # compact so memory does not grow with time
            first = 0
        self.first = first

    @property
    def begin_sequence_number(self) -> int:
        """Sequence number of the oldest readable event (next_seq when none is readable)."""
        self.prune()
        if self.first < len(self.events):
            return self.events[self.first].seq
        return self.next_seq

    def properties(self) -> dict[str, Any]:
        """Management READ of this partition, with the AMQP types the SDK expects."""
        begin = self.begin_sequence_number
        last_seq = self.next_seq - 1
        return {
            "name": self.hub.name,
            "partition": self.id,
            "begin_sequence_number": begin,
            "last_enqueued_sequence_number": last_seq,
            "last_enqueued_offset": str(self.last_offset),
            # The service reports 0001-01-01 (-62135596800000 ms) for a partition never written.
            "last_enqueued_time_utc": Timestamp(
                self.last_enqueued_ms if last_seq >= 0 else _NEVER_MS
            ),
            "is_partition_empty": begin > last_seq,
        }

    def event_at(self, seq: int) -> StoredEvent | None:
        """The readable event with sequence number ``seq``, if any."""
        events = self.events
        if not events:
            return None
        idx = seq - events[0].seq
        if idx < self.first or idx >= len(events):
            return None
        return events[idx]

    def start_sequence(self, kind: str, value: str, inclusive: bool) -> int:
        """Sequence number of the first event matching a selector filter.

        ``kind`` is ``offset``, ``sequence-number`` or ``enqueued-time``; ``value`` is the
        filter's literal (``-1`` is the start, ``@latest`` the end of the partition).
        """
        self.prune()
        begin = self.begin_sequence_number
        if kind == "offset" and value == "@latest":
            return self.next_seq
        if kind == "offset" and value == "-1":
            return begin
        number = int(value)
        if kind == "sequence-number":
            start = number if inclusive else number + 1
            return max(start, begin)
        events, lo = self.events, self.first
        if kind == "offset":
            key: Callable[[StoredEvent], int] = _offset_key
        elif kind == "enqueued-time":
            key = _enqueued_key
        else:
            raise EmulatorError(f"unknown selector {kind!r}")
        # events are ordered by both offset and enqueued time
        if inclusive:
            idx = bisect.bisect_left(events, number, lo=lo, key=key)
        else:
            idx = bisect.bisect_right(events, number, lo=lo, key=key)
        if idx < len(events):
            return events[idx].seq
        return self.next_seq

    # -- writing ------------------------------------------------------------------------------

    def append(self, messages: Iterable[bytes], partition_key: str | None) -> list[StoredEvent]:
        """Enqueue encoded AMQP messages (one send or one batch) atomically; notify readers."""
        now = max(_now_ms(), self.last_enqueued_ms)
        added = []
        for message in messages:
            payload, split, key = build_stored_payload(
                message, self.next_seq, self.next_offset, now, partition_key
            )
            event = StoredEvent(self.next_seq, self.next_offset, now, key, payload, split)
            self.events.append(event)
            added.append(event)
            self.last_offset = self.next_offset
            self.next_seq += 1
            self.next_offset += len(payload)
        self.last_enqueued_ms = now
        if self.hub.namespace.data_dir is not None:
            self._persist(added)
        for listener in list(self.listeners):
            listener()
        return added

    def _log_path(self) -> Path:
        assert self.hub.namespace.data_dir is not None
        return self.hub.namespace.data_dir / self.hub.name / f"{self.id}.log"

    _RECORD = struct.Struct(">qqqIIH")

    def _persist(self, events: list[StoredEvent]) -> None:
        if self._log is None:
            path = self._log_path()
            path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(path, "ab")  # noqa: SIM115 - kept open for the partition's life
        chunks = []
        for e in events:
            key = e.partition_key.encode("utf-8") if e.partition_key is not None else b""
            flag = 1 if e.partition_key is not None else 0
            chunks.append(
                self._RECORD.pack(e.seq, e.offset, e.enqueued_ms, len(e.payload), e.split, len(key))
                + bytes((flag,))
                + key
                + e.payload
            )
        self._log.write(b"".join(chunks))
        self._log.flush()  # a later process (or a killed emulator) sees every accepted event

    def load(self) -> None:
        """Read this partition's log from the data dir (events past retention are skipped)."""
        path = self._log_path()
        if not path.exists():
            return
        data = path.read_bytes()
        pos, rec = 0, self._RECORD
        while pos + rec.size + 1 <= len(data):
            seq, offset, enq, plen, split, klen = rec.unpack_from(data, pos)
            pos += rec.size
            flag = data[pos]
            pos += 1
            if pos + klen + plen > len(data):
                logger.warning(
                    "hub %s partition %s: truncated log tail ignored", self.hub.name, self.id
                )
                break
            key = data[pos : pos + klen].decode("utf-8") if flag else None
            pos += klen
            payload = data[pos : pos + plen]
            pos += plen
            self.events.append(StoredEvent(seq, offset, enq, key, payload, split))
            self.next_seq = seq + 1
            self.last_offset = offset
            self.next_offset = offset + plen
            self.last_enqueued_ms = max(self.last_enqueued_ms, enq)
        self.prune()

    def close(self) -> None:
        """Close the persistence log, if open."""
        if self._log is not None:
            self._log.close()
            self._log = None


def _offset_key(e: StoredEvent) -> int:
    return e.offset


def _enqueued_key(e: StoredEvent) -> int:
    return e.enqueued_ms


_NEVER_MS = -62135596800000  # 0001-01-01T00:00:00Z, the service's "not set" timestamp


def _now_ms() -> int:
    return int(time.time() * 1000)


class Hub:
    """An event hub: a fixed number of partitions and a set of consumer groups."""

    def __init__(
        self,
        namespace: Namespace,
        name: str,
        partition_count: int,
        consumer_groups: Iterable[str] = (),
        retention_seconds: float | None = None,
        created_ms: int | None = None,
    ) -> None:
        if not _HUB_NAME.match(name):
            raise EmulatorError(
                f"hub name {name!r} is not valid: use 1-256 letters, digits, '.', '-' or '_', "
                "starting and ending with a letter or digit"
            )
        if not 1 <= partition_count <= 1024:
            raise EmulatorError(f"hub {name!r}: partitions={partition_count} must be in 1..1024")
        if retention_seconds is not None and retention_seconds <= 0:
            raise EmulatorError(f"hub {name!r}: retention={retention_seconds} must be > 0 seconds")
        groups = {DEFAULT_CONSUMER_GROUP}
        for cg in consumer_groups:
            if not _CG_NAME.match(cg):
                raise EmulatorError(
                    f"consumer group {cg!r} is not valid: use 1-50 letters, digits, '.', '-' or "
                    "'_', starting and ending with a letter or digit"
                )
            groups.add(cg)
        self.namespace = namespace
        self.name = name
        self.consumer_groups = groups
        self.retention_seconds = retention_seconds
        self.created_ms = created_ms if created_ms is not None else _now_ms()
        self.partitions = [Partition(self, str(i)) for i in range(partition_count)]
        self._round_robin = 0

    @property
    def partition_ids(self) -> list[str]:
        """Partition ids ``"0"``..``"N-1"``."""
        return [p.id for p in self.partitions]

    def partition(self, partition_id: str) -> Partition | None:
        """The partition with this id, or None."""
        if partition_id.isdigit() and int(partition_id) < len(self.partitions):
            p = self.partitions[int(partition_id)]
            return p if p.id == partition_id else None
        return None

    def route(self, partition_key: str | None) -> Partition:
        """Partition for a send to the hub: by key when given, else round-robin."""
        if partition_key is not None:
            return self.partitions[partition_for_key(partition_key, len(self.partitions))]
        p = self.partitions[self._round_robin % len(self.partitions)]
        self._round_robin += 1
        return p

    def properties(self) -> dict[str, Any]:
        """Management READ of this hub, with the AMQP types the SDK expects."""
        from dagster_eventhub_ingest.resources.amqp.codec import Array

        return {
            "name": self.name,
            "created_at": Timestamp(self.created_ms),
            "partition_ids": Array(str, self.partition_ids),
        }

    def config(self) -> dict[str, Any]:
        """JSON-able description used by persistence."""
        return {
            "name": self.name,
            "partitions": len(self.partitions),
            "consumer_groups": sorted(self.consumer_groups - {DEFAULT_CONSUMER_GROUP}),
            "retention_seconds": self.retention_seconds,
            "created_ms": self.created_ms,
        }


class Namespace:
    """All hubs served by one emulator; optionally persisted under ``data_dir``.

    Mutations happen on the server's event loop; ``create_hub`` is also safe from other threads
    (a lock guards the hub table), which is how test fixtures add hubs at runtime.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str] | None = None, retention_seconds: float | None = None
    ) -> None:
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.default_retention = retention_seconds
        self.hubs: dict[str, Hub] = {}
        self._lock = threading.Lock()
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._load()

    def _meta_path(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "hubs.json"

    def _load(self) -> None:
        path = self._meta_path()
        if not path.exists():
            return
        for cfg in json.loads(path.read_text())["hubs"]:
            retention = cfg.get("retention_seconds")
            hub = Hub(
                self,
                cfg["name"],
                int(cfg["partitions"]),
                cfg.get("consumer_groups", ()),
                retention if retention is not None else self.default_retention,
                cfg.get("created_ms"),
            )
            for p in hub.partitions:
                p.load()
            self.hubs[hub.name] = hub
            logger.info("hub %s: loaded %d partitions from %s", hub.name, len(hub.partitions), path)

    def _save(self) -> None:
        if self.data_dir is None:
            return
        tmp = self._meta_path().with_suffix(".tmp")
        tmp.write_text(json.dumps({"hubs": [h.config() for h in self.hubs.values()]}, indent=1))
        os.replace(tmp, self._meta_path())

    def create_hub(
        self,
        name: str,
        partitions: int,
        consumer_groups: Iterable[str] = (),
        retention_seconds: float | None = None,
        exist_ok: bool = True,
    ) -> Hub:
        """Create a hub (or return the existing one when the partition count matches)."""
        with self._lock:
            existing = self.hubs.get(name)
            if existing is not None:
                if not exist_ok or len(existing.partitions) != partitions:
                    raise EmulatorError(
                        f"hub {name!r} already exists with {len(existing.partitions)} partitions"
                    )
                for cg in consumer_groups:
                    existing.consumer_groups.add(cg)
                self._save()
                return existing
            hub = Hub(
                self,
                name,
                partitions,
                consumer_groups,
                retention_seconds if retention_seconds is not None else self.default_retention,
            )
            self.hubs[name] = hub
            self._save()
            logger.info("hub %s: created with %d partitions", name, partitions)
            return hub

    def delete_hub(self, name: str) -> None:
        """Delete a hub and its events, as the service does (KeyError if there is none).

        Creating one under the same name afterwards starts again at sequence number 0, with a
        new creation time: the state a forgotten checkpoint store must cope with.
        """
        with self._lock:
            hub = self.get(name)
            if hub is None:
                raise KeyError(f"no hub named {name!r}")
            del self.hubs[hub.name]
            for p in hub.partitions:
                p.close()
                if self.data_dir is not None:
                    p._log_path().unlink(missing_ok=True)
            self._save()
            logger.info("hub %s: deleted", hub.name)

    def get(self, name: str) -> Hub | None:
        """The hub named ``name`` (case-insensitive, like the service), or None."""
        hub = self.hubs.get(name)
        if hub is not None:
            return hub
        lowered = name.lower()
        for key, value in self.hubs.items():
            if key.lower() == lowered:
                return value
        return None

    def close(self) -> None:
        """Close every open persistence log."""
        for hub in self.hubs.values():
            for p in hub.partitions:
                p.close()
