"""Event Hubs' reader limits and defaults and the data-loss choices, declared once.

Read by the configuration model (``resources/config/``) and the Spark source's reader options
(``resources/eventhubs_source/options.py``, which runs on executors and so stays free of pydantic).
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "DEFAULT_PREFETCH",
    "DEFAULT_READERS_PER_PARTITION",
    "DEFAULT_RECEIVE_TIMEOUT_SECONDS",
    "MAX_PREFETCH",
    "MAX_READERS_PER_PARTITION",
    "ON_DATA_LOSS",
    "OnDataLoss",
]

#: What a read does when events expired before being read: fail, or skip to what is retained.
OnDataLoss = Literal["fail", "skip"]
ON_DATA_LOSS: tuple[str, ...] = get_args(OnDataLoss)
#: Event Hubs allows 5 concurrent (non-epoch) readers per partition and consumer group.
MAX_READERS_PER_PARTITION = 5
#: Largest prefetch (events buffered per receiver) a read accepts.
MAX_PREFETCH = 10_000
#: Events a receiver prefetches unless told otherwise.
DEFAULT_PREFETCH = 300
#: Seconds a read waits for the next event before it judges the hub unavailable.
DEFAULT_RECEIVE_TIMEOUT_SECONDS = 30.0
#: Concurrent readers (Spark input partitions) per partition range unless told otherwise.
DEFAULT_READERS_PER_PARTITION = 1
