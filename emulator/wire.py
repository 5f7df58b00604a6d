"""The emulator's AMQP vocabulary: limits, names, and the request and batch formats.

Plain values and functions the links, sessions and the service share (no state): the
service's limits and link properties, :class:`LinkRefused`, CBS and management request and
response messages, and a producer's batch message split into its events.
"""

from __future__ import annotations

import logging
import re
import struct
import time
from typing import Any

from dagster_eventhub_ingest.resources.amqp import framing
from dagster_eventhub_ingest.resources.amqp.codec import (
    Int,
    Symbol,
    decode,
    split_list,
)
from dagster_eventhub_ingest.resources.amqp.framing import section_spans

logger = logging.getLogger(__name__)

BATCH_MESSAGE_FORMAT = 0x80013700
MAX_CONCURRENT_READERS = 5  # non-epoch readers per partition and consumer group (the service's)
DEFAULT_MAX_MESSAGE_SIZE = 1024 * 1024
DEFAULT_MAX_FRAME_SIZE = 1024 * 1024
# Advertised in our open and enforced: a connection silent for longer is closed (the service
# closes idle connections too; the SDK reconnects on its next call).
DEFAULT_IDLE_TIMEOUT = 240.0
SESSION_WINDOW = 0x7FFFFFFF
PRODUCER_CREDIT = 1000

EPOCH = b"com.microsoft:epoch"
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
SELECTOR_FILTER = b"apache.org:selector-filter:string"
SELECTOR_FILTER_CODE = 0x0000468C00000004
SELECTOR = re.compile(
    r"^\s*amqp\.annotation\.x-opt-(offset|sequence-number|enqueued-time)\s*(>=|>)\s*'([^']*)'\s*$",
    re.IGNORECASE,
)
PROPERTIES_FIELDS = 13
LAST_SEQ = Symbol("last_enqueued_sequence_number")
LAST_OFFSET = Symbol("last_enqueued_offset")
LAST_TIME = Symbol("last_enqueued_time_utc")
RETRIEVAL_TIME = Symbol("runtime_info_retrieval_time_utc")
FRAME_SIZE = struct.Struct(">I")


class LinkRefused(Exception):
    """An attach the service would refuse: carries the AMQP error condition and description."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def text_of(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def now_ms() -> int:
    return int(time.time() * 1000)


def path_of(address: str) -> list[str]:
    """Path segments of a link address: ``amqps://host:port/hub/...`` or ``hub/...``."""
    if "://" in address:
        rest = address.split("://", 1)[1]
        path = rest.split("/", 1)[1] if "/" in rest else ""
    else:
        path = address
    return [p for p in path.split("/") if p]


def decode_request(payload: bytes) -> dict[str, Any]:
    """The parts of a CBS or management request the emulator needs."""
    request: dict[str, Any] = {"app": {}, "body": None, "message_id": None, "reply_to": None}
    for code, start, _end in section_spans(payload):
        value, _ = decode(payload, start + 3) if payload[start + 1] == 0x53 else (None, 0)
        if code == 0x73 and isinstance(value, list):
            request["message_id"] = value[0] if value else None
            request["reply_to"] = text_of(value[4]) if len(value) > 4 else None
        elif code == 0x74 and isinstance(value, dict):
            request["app"] = {text_of(k): v for k, v in value.items()}
        elif code in (0x75, 0x77):
            request["body"] = value
    return request


def response(correlation_id: Any, status: int, description: str, body: Any = None) -> bytes:
    props: list[Any] = [None] * PROPERTIES_FIELDS
    props[5] = correlation_id
    out = bytearray()
    out += framing.encode_section(0x73, props)
    out += framing.encode_section(
        0x74,
        {
            "status-code": Int(status),
            "status-description": description,
            "statusDescription": description,
        },
    )
    if body is not None:
        out += framing.encode_section(0x77, body)
    return bytes(out)


_PKEY = b"x-opt-partition-key"


def split_batch(payload: bytes, message_format: int) -> tuple[list[bytes], str | None]:
    """The inner messages of a send (one, or N for a batch) and its partition key, if any.

    The key is the ``x-opt-partition-key`` message annotation of the message sent (the outer
    one of a batch), so a single keyed event is routed exactly like a keyed batch.
    """
    batch = message_format == BATCH_MESSAGE_FORMAT
    messages: list[bytes] = [] if batch else [payload]
    partition_key: str | None = None
    for code, start, _end in section_spans(payload):
        if payload[start + 1] != 0x53:
            continue
        if code == 0x75 and batch:
            value, _ = decode(payload, start + 3)
            messages.append(bytes(value))
        elif code == 0x72 and payload[start + 3] != 0x40:
            # Only the key's value is decoded: the map may hold keys a dict cannot (lists).
            spans, _ = split_list(payload, start + 3)
            for i in range(0, len(spans) - 1, 2):
                ks = spans[i][0]
                if payload[ks] in (0xA3, 0xA1) and payload[ks + 2 : spans[i][1]] == _PKEY:
                    value, _ = decode(payload, spans[i + 1][0])
                    if value is not None:
                        partition_key = text_of(value)
        elif code > 0x72 and not batch:
            break  # annotations come before properties and the body
    if not messages:
        raise ValueError("a batch message (format 0x80013700) must carry data sections")
    return messages, partition_key
