"""The run's log: each line to the run's logger and, when given, to Dagster's ``context.log``."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["TeeLog"]

#: The run's lines go to one logger, whichever step of ops/run/ writes them.
logger = logging.getLogger("dagster_eventhub_ingest.ops.run")


class TeeLog:
    """Log lines to the run's logger and, when given, to Dagster's ``context.log`` too."""

    def __init__(self, extra: Any) -> None:
        self.extra = extra

    def info(self, msg: str) -> None:
        logger.info(msg)
        if self.extra is not None:
            self.extra.info(msg)

    def warning(self, msg: str) -> None:
        logger.warning(msg)
        self.extra_warning(msg)

    def extra_warning(self, msg: str) -> None:
        """Only to ``context.log`` (for lines another module already logged itself)."""
        if self.extra is not None:
            self.extra.warning(msg)

    def extra_only(self) -> _ExtraLog | None:
        """A log for modules that log their lines themselves
        (``dagster_eventhub_ingest.ops.balancing``): only ``context.log`` gets them from it. None
        without one."""
        return None if self.extra is None else _ExtraLog(self.extra)


class _ExtraLog:
    """Dagster's ``context.log`` alone, as a
    :class:`dagster_eventhub_ingest.ops.balancing.base.RunLog`."""

    def __init__(self, extra: Any) -> None:
        self.extra = extra

    def info(self, msg: str) -> None:
        self.extra.info(msg)

    def warning(self, msg: str) -> None:
        self.extra.warning(msg)
