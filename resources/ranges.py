"""The one sequence-number range type: inclusive ``[start, end]`` of one partition.

Plans, intents, write statistics, run reports and the Spark source speak of ranges the same way:
inclusive on both ends, ``end < start`` meaning empty. :class:`SeqRange` is that value. It is a
``(start, end)`` tuple, so it unpacks, compares, prints, pickles (executors get it) and
serializes to JSON (``[start, end]``) exactly like the pairs it replaced; no blob, intent or
report format changes.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SeqRange"]


class SeqRange(NamedTuple):
    """Inclusive sequence numbers ``[start, end]`` of one partition; empty when ``end < start``."""

    start: int
    end: int

    @property
    def size(self) -> int:
        """Number of sequence numbers in the range (0 when empty)."""
        return max(0, self.end - self.start + 1)

    def __repr__(self) -> str:
        # As the pair it replaced: messages, logs and reports read the same.
        return tuple.__repr__(self)
