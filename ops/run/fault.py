"""Fault injection for crash tests: ``EHINGEST_FAULT`` kills this process at a named run step.

Format: ``EHINGEST_FAULT="<step>:<trigger>[,<step>:<trigger>...]"`` where ``trigger`` is either
a probability (``0.3``: each time the step is reached, die with that chance) or a count
(``2``: die the 2nd time the step is reached). ``EHINGEST_FAULT_SEED`` makes probabilities
repeatable. Steps (see docs/run.md for where each crash lands):

- ``after_claim``: leases taken, nothing recorded yet.
- ``after_intent``: write-ahead intents recorded, nothing read.
- ``mid_read``: while the Spark job reads and writes (a timer kills the driver after a random
  0-``EHINGEST_FAULT_MID_READ_MAX_S`` seconds, default 1.5).
- ``after_write``: the sink holds the ranges, no checkpoint moved.
- ``during_checkpoint``: before each partition's fenced checkpoint, so some partitions of a
  cycle are checkpointed and others not.
- ``after_checkpoint``: checkpoints moved, leases not released.

The kill is ``SIGKILL`` to this process: no ``finally``, no atexit, exactly like a lost VM.
Unset (the default), every hook is a dictionary lookup and nothing else.

Slow steps for timing tests (nothing is killed): ``EHINGEST_PAUSE="<step>:<seconds>[,...]"``
sleeps at a step (the steps above, plus ``before_join``: before the run writes its first
heartbeat, and ``spark_start``: before the run starts its Spark session), e.g. a slow Spark
start that a concurrent run's claims overlap.
``EHINGEST_SLOW_READ_SECONDS`` slows every reader on the executors
(:mod:`dagster_eventhub_ingest.resources.eventhubs_source.progress`).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time

from dagster_eventhub_ingest.resources.errors import ConfigurationError

__all__ = ["PAUSE_STEPS", "STEPS", "FaultPlan", "fault_point", "fault_timer", "pause_point"]

logger = logging.getLogger(__name__)

STEPS = (
    "after_claim",
    "after_intent",
    "mid_read",
    "after_write",
    "during_checkpoint",
    "after_checkpoint",
)


PAUSE_STEPS = (*STEPS, "before_join", "spark_start")


class FaultPlan:
    """Parsed ``EHINGEST_FAULT``: per step, a probability or the hit count that kills."""

    def __init__(self, spec: str, seed: int | None = None) -> None:
        self.triggers: dict[str, float | int] = {}
        self.hits: dict[str, int] = {}
        self._rng = random.Random(seed)
        for item in filter(None, (s.strip() for s in spec.split(","))):
            step, sep, raw = item.partition(":")
            if step not in STEPS or not sep:
                raise ConfigurationError(
                    f"EHINGEST_FAULT: {item!r} is not '<step>:<probability or count>'; valid "
                    f"steps: {', '.join(STEPS)}"
                )
            try:
                value: float | int = float(raw) if "." in raw else int(raw)
            except ValueError:
                raise ConfigurationError(
                    f"EHINGEST_FAULT: trigger {raw!r} for {step} is neither a probability "
                    "(0.0-1.0, with a dot) nor a count (integer >= 1)"
                ) from None
            self.triggers[step] = value

    def fires(self, step: str) -> bool:
        """Count a hit of ``step``; True when this hit should kill the process."""
        trigger = self.triggers.get(step)
        if trigger is None:
            return False
        self.hits[step] = self.hits.get(step, 0) + 1
        if isinstance(trigger, float):
            return self._rng.random() < trigger
        return self.hits[step] == trigger

    def uniform(self, high: float) -> float:
        """A random delay in ``[0, high]`` from the plan's (seedable) generator."""
        return self._rng.uniform(0.0, high)


_plan: FaultPlan | None = None
_plan_spec: str | None = None


def _current() -> FaultPlan | None:
    global _plan, _plan_spec
    spec = os.environ.get("EHINGEST_FAULT", "")
    if not spec:
        return None
    if spec != _plan_spec:
        seed = os.environ.get("EHINGEST_FAULT_SEED")
        _plan = FaultPlan(spec, int(seed) if seed else None)
        _plan_spec = spec
    return _plan


def _die(step: str) -> None:
    logger.warning("EHINGEST_FAULT: killing process %d at step %s", os.getpid(), step)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def fault_point(step: str) -> None:
    """Kill this process with SIGKILL if ``EHINGEST_FAULT`` says so for ``step`` (after the
    pause ``EHINGEST_PAUSE`` gives it, if any)."""
    pause_point(step)
    plan = _current()
    if plan is not None and plan.fires(step):
        _die(step)


def fault_timer(step: str = "mid_read") -> threading.Timer | None:
    """Arm a timer that kills the process during a long step; cancel it when the step ends."""
    plan = _current()
    if plan is None or not plan.fires(step):
        return None
    high = float(os.environ.get("EHINGEST_FAULT_MID_READ_MAX_S", "1.5"))
    timer = threading.Timer(plan.uniform(high), _die, args=(step,))
    timer.daemon = True
    timer.start()
    return timer


def pause_point(step: str) -> None:
    """Sleep at ``step`` if ``EHINGEST_PAUSE`` names it (a timing-test hook; unset: nothing)."""
    spec = os.environ.get("EHINGEST_PAUSE", "")
    if not spec:
        return
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, sep, raw = item.partition(":")
        if name not in PAUSE_STEPS or not sep:
            raise ConfigurationError(
                f"EHINGEST_PAUSE: {item!r} is not '<step>:<seconds>'; valid steps: "
                f"{', '.join(PAUSE_STEPS)}"
            )
        if name == step:
            try:
                seconds = float(raw)
            except ValueError:
                raise ConfigurationError(
                    f"EHINGEST_PAUSE: {raw!r} for {step} is not a number of seconds"
                ) from None
            logger.warning("EHINGEST_PAUSE: pausing %.1f s at step %s", seconds, step)
            time.sleep(seconds)
