"""A starting or ending position of a read, as the ``*_position`` options spell it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from dagster_eventhub_ingest.resources.errors import ConfigurationError

PositionKind = Literal["earliest", "latest", "sequence_number", "offset", "enqueued_time"]

#: The seconds' fraction of an ISO 8601 time, any number of digits.
_FRACTION = re.compile(r"(:\d{2})[.,](\d+)")


def parse_utc(text: str) -> datetime:
    """An ISO 8601 time as an aware UTC datetime: ``Z`` or an offset, UTC if no zone is given,
    a fraction of a second of any length (cut to microseconds).

    Python 3.10's ``datetime.fromisoformat`` takes neither ``Z`` nor a fraction of other than 3
    or 6 digits (``...T12:00:00.1234Z`` is how the connector's docs spell one), so both are
    normalized first. Raises ``ValueError`` for anything else it cannot read.
    """
    raw = text.strip()
    if raw[-1:] in ("Z", "z"):
        raw = raw[:-1] + "+00:00"
    raw = _FRACTION.sub(lambda m: f"{m.group(1)}.{m.group(2)[:6].ljust(6, '0')}", raw, count=1)
    when = datetime.fromisoformat(raw)
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


@dataclass(frozen=True)
class EventPosition:
    """A starting or ending position, parsed from an option string.

    Accepted forms: ``earliest``, ``latest``, a sequence number (``1234`` or ``seq:1234``),
    an offset (``offset:<offset>``) and an enqueued time (``enqueued:2024-05-01T12:00:00Z``,
    ISO 8601, UTC if no zone is given).
    """

    kind: PositionKind
    value: int | str | datetime | None = None

    VALID_FORMS = (
        "'earliest', 'latest', a sequence number ('1234' or 'seq:1234'), 'offset:<offset>', "
        "'enqueued:<ISO 8601 time>'"
    )

    @classmethod
    def parse(cls, text: str, option: str) -> EventPosition:
        """Parse ``text``; the error names ``option``, the value and the valid forms."""
        raw = text.strip()
        low = raw.lower()
        try:
            if low in ("earliest", "-1", "@earliest"):
                return cls("earliest")
            if low in ("latest", "@latest"):
                return cls("latest")
            if low.startswith(("seq:", "sequence_number:", "sequencenumber:")):
                return cls._seq(raw.split(":", 1)[1])
            if low.lstrip("+").isdigit():
                return cls._seq(raw)
            if low.startswith("offset:"):
                value = raw.split(":", 1)[1].strip()
                if not value:
                    raise ValueError("empty offset")
                return cls("offset", value)
            if low.startswith(("enqueued:", "enqueued_time:", "enqueuedtime:", "time:")):
                return cls("enqueued_time", parse_utc(raw.split(":", 1)[1]))
        except ValueError as exc:
            raise ConfigurationError(
                f"{option}: {text!r} is not a valid position ({exc}); valid: {cls.VALID_FORMS}"
            ) from exc
        raise ConfigurationError(
            f"{option}: {text!r} is not a valid position; valid: {cls.VALID_FORMS}"
        )

    @classmethod
    def _seq(cls, text: str) -> EventPosition:
        number = int(text.strip())
        if number < 0:
            raise ValueError("sequence numbers are >= 0")
        return cls("sequence_number", number)

    def __str__(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "sequence_number":
            return f"seq:{self.value}"
        if self.kind == "offset":
            return f"offset:{self.value}"
        assert isinstance(self.value, datetime)
        return f"enqueued:{self.value.isoformat()}"
