"""A starting or ending position of a read, as the ``*_position`` options spell it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from dagster_eventhub_ingest.resources.errors import ConfigurationError

PositionKind = Literal["earliest", "latest", "sequence_number", "offset", "enqueued_time"]


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
                stamp = raw.split(":", 1)[1].strip()
                when = datetime.fromisoformat(stamp.replace("Z", "+00:00").replace("z", "+00:00"))
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                return cls("enqueued_time", when.astimezone(UTC))
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
