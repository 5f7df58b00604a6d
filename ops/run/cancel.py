"""Stopping a run cleanly: SIGTERM, SIGINT, Dagster's Terminate, Airflow's ``on_kill``.

A :class:`Cancellation` is the one request to stop that every surface makes, each in the way
its host allows:

* the ``ehingest`` CLI owns its process and installs handlers for SIGTERM and SIGINT that call
  :meth:`Cancellation.cancel` (cli/run.py);
* Dagster owns the signal handlers of a step: its Terminate (and SIGTERM/SIGINT) raises
  ``DagsterExecutionInterruptedError`` in the step's main thread;
* Airflow owns them too: SIGTERM calls the operator's ``on_kill``, which calls
  :meth:`Cancellation.cancel`.

:meth:`Cancellation.run` runs the ingestion on a worker thread and waits for it in the caller's
thread. An exception the host raises there (Dagster's, a ``KeyboardInterrupt``) therefore never
lands in the middle of a store write or a Spark call: it cancels, waits up to
:data:`CANCEL_GRACE_SECONDS` for the run to wind down, and is raised again for the host. The run
itself stops at its next safe point (``check``): before a claim, before a read; a Spark job in
flight is interrupted (the hooks of :meth:`on_cancel`); a commit that finished is checkpointed.
Then its leases are released with their intents kept, so the next run takes over at once and
replays them, and the caller stops the Spark session and the processes it started.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from dagster_eventhub_ingest.resources.errors import RunCancelledError

__all__ = ["CANCEL_GRACE_SECONDS", "Cancellation"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a stopped run may take to wind down by itself (its Spark jobs interrupted, its
#: leases released) before the :meth:`Cancellation.on_force` hooks end what it waits on (the
#: Spark session: a planner or a commit in the JVM cannot be interrupted otherwise).
CANCEL_GRACE_SECONDS = 6.0
#: How long it may take after that, to release its leases; then the caller stops waiting (the
#: leases expire). Both together, and the JVM's end, keep a stopped process under 15 s.
FORCE_GRACE_SECONDS = 5.0
_POLL_SECONDS = 0.1
_REPEAT_SECONDS = 1.0


class Cancellation:
    """A request to stop one run, made once, from any thread or a signal handler."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        #: The signal that asked, when one did (the CLI's exit code says which).
        self.signal: int | None = None
        self._hooks: list[Callable[[], None]] = []
        self._force: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def cancel(self, reason: str, *, signum: int | None = None) -> None:
        """Ask the run to stop. Only sets a flag (safe in a signal handler); the first reason
        is kept. The hooks run on the thread waiting in :meth:`run`."""
        if self._event.is_set():
            return
        self.reason, self.signal = reason, signum
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether a stop was asked for."""
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, waking at once when cancelled; True if cancelled."""
        return self._event.wait(seconds)

    def check(self, where: str) -> None:
        """Raise :class:`RunCancelledError` if a stop was asked for (``where``: the run's
        step, for the message)."""
        if self._event.is_set():
            raise self.error(where)

    def error(self, where: str) -> RunCancelledError:
        """The error a cancelled run ends with."""
        return RunCancelledError(
            f"the run stopped {where} ({self.reason or 'cancelled'}); its leases are released "
            "with their pending intents, so the next run takes over at once and replays them",
            signal=self.signal,
        )

    def on_cancel(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (e.g. interrupt the run's Spark jobs) once a stop is asked for, on the
        thread that waits in :meth:`run`, and again every :data:`_REPEAT_SECONDS` until the run
        ended: an operation that started just after an interrupt is interrupted too."""
        with self._lock:
            self._hooks.append(hook)

    def on_force(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (e.g. close the Spark session the run uses) once, when a stopped run
        did not wind down within the grace of :meth:`run`: what the run waits on then fails,
        and it releases its leases. Registered by whoever owns that resource."""
        with self._lock:
            self._force.append(hook)

    def _run_hooks(self, force: bool = False) -> None:
        with self._lock:
            hooks = list(self._force if force else self._hooks)
        for hook in hooks:
            self._call(hook)

    @staticmethod
    def _call(hook: Callable[[], None]) -> None:
        try:
            hook()
        except Exception:  # winding down goes on: the run stops at its next check anyway
            logger.warning("a cancellation hook failed", exc_info=logger.isEnabledFor(logging.INFO))

    def run(
        self,
        work: Callable[[], T],
        *,
        grace: float = CANCEL_GRACE_SECONDS,
        force_grace: float = FORCE_GRACE_SECONDS,
    ) -> T:
        """``work()`` on a worker thread, waited for here; see the module's docstring.

        An exception raised in this thread while waiting (the host's interrupt) cancels the
        work. A cancelled work still running after ``grace`` seconds is forced (the
        :meth:`on_force` hooks), and given ``force_grace`` more. Then the host's exception is
        raised again, if there was one; otherwise what ``work`` returned or raised.
        """
        outcome: list[T] = []
        failure: list[BaseException] = []
        context = contextvars.copy_context()
        # Waited on instead of Thread.join: an exception raised in a join's wait marks the
        # thread as ended though it still runs (CPython's bpo-45274 handling).
        ended = threading.Event()

        def target() -> None:
            try:
                outcome.append(context.run(work))
            except BaseException as exc:
                failure.append(exc)
            finally:
                ended.set()

        worker = threading.Thread(target=target, name="ehingest-run", daemon=True)
        worker.start()
        interrupt: BaseException | None = None
        deadline: float | None = None
        forced = False
        fired = 0.0
        while not ended.is_set():
            try:
                if ended.wait(_POLL_SECONDS) or not self.cancelled:
                    continue
                now = time.monotonic()
                if deadline is None:
                    deadline = now + grace
                if not forced and now - fired >= _REPEAT_SECONDS:
                    fired = now
                    self._run_hooks()
                if now <= deadline:
                    continue
                if not forced:
                    forced = True
                    logger.warning(
                        "the run did not wind down within %.0f s of being stopped (%s); "
                        "ending its Spark session",
                        grace,
                        self.reason,
                    )
                    self._run_hooks(force=True)
                    deadline = time.monotonic() + force_grace
                    continue
                logger.warning(
                    "the run did not wind down after its Spark session ended (%s); its "
                    "leases expire after lease_expiry_seconds",
                    self.reason,
                )
                break
            except BaseException as exc:  # the host's interrupt, raised in this thread
                if interrupt is None:
                    interrupt = exc
                self.cancel(f"interrupted: {type(exc).__name__}")
        if interrupt is not None:
            raise interrupt
        if failure:
            raise failure[0]
        if not outcome:
            raise self.error("before it finished")
        return outcome[0]
