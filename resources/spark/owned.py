"""A SparkSession owned by whoever started it, and the end of a local driver's JVM.

For whoever starts a session for one task and must leave nothing running when the task ends (the
``ehingest`` CLI, the Airflow operator, Dagster's local PySpark resource):
:class:`OwnedSession` stops exactly what its start started, and :func:`end_local_driver` ends
this process's local driver JVM with the Python workers it runs.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dagster_eventhub_ingest.resources.spark.session import join_preparations

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["JVM_EXIT_SECONDS", "OwnedSession", "end_local_driver"]


#: Seconds a local driver's JVM gets to exit once its stdin is closed (how PySpark's gateway
#: learns its driver is gone) before it and its children are terminated, then killed.
JVM_EXIT_SECONDS = 5.0


class OwnedSession:
    """A SparkSession started on first use, and stopped by :meth:`close` with exactly what its
    start started: the session when no SparkContext was running before it, and the local
    driver's JVM, with the Python workers it runs, when this process had no JVM before it.

    For whoever starts a session for one task and must leave nothing running when the task ends
    (the ``ehingest`` CLI, the Airflow operator, Dagster's local PySpark resource). A session
    that was running already (a notebook's, a test's) is used and left as it was.

    Thread-safe: :meth:`close` may come from another thread while the session starts (the run's
    early start) or is in use; it returns once what was started is stopped.

    Args:
        factory: starts (or returns, ``getOrCreate``) the session.
    """

    def __init__(self, factory: Callable[[], SparkSession]) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._stopping = threading.Lock()
        self._started = threading.Event()
        self._starting = False
        self._closed = False
        self._keep_archive = True
        self._children_before: set[int] = set()
        self._session: SparkSession | None = None
        self._stop_context = False
        self._end_jvm = False

    def get(self) -> SparkSession:
        """The session, started on the first call.

        Raises:
            RunCancelledError: :meth:`close` came first.
        """
        import psutil

        with self._lock:
            if self._session is not None:
                return self._session
            if self._closed:
                from dagster_eventhub_ingest.resources.errors import RunCancelledError

                raise RunCancelledError("the Spark session was closed before it started")
            self._starting = True
            self._children_before = {p.pid for p in psutil.Process().children()}
        try:
            had_context, had_jvm = _running_driver()
            session = self._factory()
            from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

            connect = is_connect_session(session)
            with self._lock:
                self._session = session
                self._stop_context = connect or not had_context
                self._end_jvm = not connect and not had_jvm
                closed = self._closed
        finally:
            with self._lock:
                self._starting = False
            self._started.set()
        if closed:  # closed while it started: stop it now
            self._stop()
        return session

    def driver_exited(self) -> int | None:
        """The exit code of the local driver JVM this session's start launched, once it has
        exited under the session (killed, out of memory): the session is dead then. None while
        it runs, and for a session whose JVM (or Spark Connect server) is not this one's."""
        from dagster_eventhub_ingest.resources.spark import jvm_archive

        with self._lock:
            if self._session is None or not self._end_jvm:
                return None
        proc = jvm_archive.gateway_process()
        return None if proc is None else proc.poll()

    def close(self, *, keep_archive: bool = True, wait: float = 30.0) -> None:
        """Stop what :meth:`get` started (idempotent), and return once it is stopped.

        ``keep_archive``: let a JVM that writes its class-data archive at exit finish writing
        it (up to minutes, once per machine); False (a stopped run, in a hurry) ends the JVM
        at once. ``wait``: how long to let a start in progress finish; a JVM still starting
        after it is killed.
        """
        with self._lock:
            self._closed = True
            self._keep_archive = self._keep_archive and keep_archive
            starting = self._starting
        if starting and not self._started.wait(wait):
            self._kill_starting()
        self._stop()

    def _stop(self) -> None:
        with self._stopping:  # one stop at a time; a second close() returns after the first
            with self._lock:
                session, self._session = self._session, None
                stop_context, end_jvm = self._stop_context, self._end_jvm
                keep_archive = self._keep_archive
            if session is None:
                return
            import logging

            log = logging.getLogger(__name__)
            if end_jvm:  # the finalizer thread gets through its queue while the session stops
                from pyspark import SparkContext

                _stop_object_releases(SparkContext._gateway, before_stop=True)
            # In a hurry, ending the JVM stops the context with it (its shutdown hook).
            if stop_context and (keep_archive or not end_jvm):
                try:
                    if end_jvm:
                        _stop_before_the_jvm_ends(session)
                    else:
                        session.stop()
                except Exception:  # a JVM that already died: ending it below is what is left
                    log.debug("stopping the Spark session failed", exc_info=True)
            elif end_jvm:  # in a hurry: only PySpark's accumulator server, before the JVM ends
                _shut_accumulator_server(session)
            if end_jvm:
                end_local_driver(keep_archive=keep_archive)

    def _kill_starting(self) -> None:
        """Kill a local driver JVM this session's start launched and that still starts."""
        import contextlib
        import logging

        import psutil

        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if child.pid not in self._children_before and child.name() == "java":
                    logging.getLogger(__name__).warning(
                        "the Spark driver (pid %s) was still starting when the session was "
                        "closed; killing it",
                        child.pid,
                    )
                    for proc in [*child.children(recursive=True), child]:
                        with contextlib.suppress(psutil.Error):
                            proc.kill()


def _stop_before_the_jvm_ends(session: SparkSession) -> bool:
    """``session.stop()`` of a classic session whose JVM is ended next, without waiting out
    PySpark's accumulator server. Returns whether the server was woken.

    A SparkContext's stop ends by shutting down the Python server its JVM sends accumulator
    updates to. That server's request handler looks for an update once a second and for the
    shutdown between two looks, so the stop waits out the rest of that second: 0.8-0.9 s of
    every run's end. With the server woken (:func:`_wake_while_shutting`), the stop returns
    0.1 s after it began. Best effort: without PySpark's accumulator server (Spark Connect),
    or where anything of this fails, the stop ends as PySpark's does. For a JVM about to end
    only: the stop's thread, not the caller's, clears the JVM's thread-local active session.
    """
    update = _empty_update(session)
    if update is None:
        session.stop()
        return False
    return _wake_while_shutting(*update, session.stop)


def _shut_accumulator_server(session: SparkSession, wait: float = 1.0) -> None:
    """Shut PySpark's accumulator server of a classic session whose JVM is ended next without
    the session being stopped (in a hurry), its handler woken (:func:`_wake_while_shutting`).

    The handler reads updates from a connection the JVM opened; ending the JVM closes it under
    the handler, which fails reading it, and socketserver prints that ``EOFError``'s traceback
    to stderr (a stopped run's output, in the CLI). A handler that saw the shutdown has
    returned and closed its end first. Returns after ``wait`` seconds at most: a JVM that does not
    answer is ended all the same (its handler may print then).
    """
    import logging

    def shut() -> None:
        try:
            update = _empty_update(session)
            if update is not None:
                _wake_while_shutting(*update, update[0].shutdown)
        except Exception:  # the JVM is ended next all the same
            logging.getLogger(__name__).debug(
                "shutting the accumulator server failed", exc_info=True
            )

    thread = threading.Thread(target=shut, name="ehingest-accumulators-shut", daemon=True)
    thread.start()
    thread.join(wait)


def _empty_update(session: SparkSession) -> tuple[Any, Any, Any] | None:
    """(PySpark's accumulator server, the context's JVM accumulator, an empty update of it) of
    a classic session; None without the server (Spark Connect), or where taking the update
    failed (it needs a running context, so it is taken before the server's shutdown)."""
    import logging

    from dagster_eventhub_ingest.resources.spark.kind import is_connect_session

    if is_connect_session(session):
        return None
    context = session.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    accumulator = getattr(context, "_javaAccumulator", None)
    if server is None or accumulator is None:
        return None
    try:
        return server, accumulator, accumulator.copyAndReset()
    except Exception:
        logging.getLogger(__name__).debug("copying the accumulator failed", exc_info=True)
        return None


def _wake_while_shutting(
    server: Any, accumulator: Any, empty: Any, shutting: Callable[[], None]
) -> bool:
    """Run ``shutting`` (which shuts PySpark's accumulator ``server`` down) on a thread of its
    own and wake the server's handler meanwhile; return whether it was woken, once
    ``shutting`` returned (raising what it raised).

    The handler looks for an update once a second, and for the shutdown between two looks.
    Once the shutdown is asked for, one ``empty`` update from the context's own JVM
    ``accumulator`` wakes the handler, which answers it, sees the shutdown and ends.
    """
    import logging

    failed: list[BaseException] = []

    def run() -> None:
        try:
            shutting()
        except BaseException as exc:  # raised in the caller's thread below
            failed.append(exc)

    thread = threading.Thread(target=run, name="ehingest-accumulators-shutdown", daemon=True)
    thread.start()
    while thread.is_alive() and not getattr(server, "server_shutdown", False):
        thread.join(0.005)
    woken = False
    if thread.is_alive():
        try:
            accumulator.merge(empty)
            woken = True
        except Exception:  # the server ended meanwhile: nothing to wake
            logging.getLogger(__name__).debug("waking the accumulator server failed", exc_info=True)
    thread.join()
    if failed:
        raise failed[0]
    return woken


def _running_driver() -> tuple[bool, bool]:
    """(a SparkContext is running, a JVM gateway exists) in this process, before a start."""
    try:
        from pyspark import SparkContext
    except ImportError:  # a Spark Connect-only client
        return False, False
    return SparkContext._active_spark_context is not None, SparkContext._gateway is not None


def end_local_driver(*, keep_archive: bool = True, wait: float = JVM_EXIT_SECONDS) -> None:
    """End this process's local Spark driver JVM and the processes it started (Python workers),
    and forget its gateway, context and sessions so that a later session starts a JVM of its
    own.

    py4j stops sending the JVM the objects Python frees (:func:`_stop_object_releases`), the
    JVM's py4j server is shut (:func:`_shut_gateway_server`), then the JVM's stdin is closed
    (PySpark's own way of telling its gateway the driver is gone; the
    JVM then exits, writing its class-data archive if it was to, see
    :mod:`dagster_eventhub_ingest.resources.spark.jvm_archive`); whatever of it and its children is
    still running after ``wait`` seconds is terminated, then killed. ``keep_archive=False`` (in
    a hurry): what still runs after one second is killed, an archive being written with it.
    Only for a JVM this process launched (``SparkContext._gateway.proc``); a no-op without
    one (``spark-submit``'s).
    """
    import contextlib
    import logging

    import psutil
    from pyspark import SparkContext

    from dagster_eventhub_ingest.resources.spark import jvm_archive

    log = logging.getLogger(__name__)
    proc = jvm_archive.gateway_process()
    if proc is None:
        return
    gateway = SparkContext._gateway
    releases = _stop_object_releases(gateway, before_stop=False)
    join_preparations(5.0)
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    releases.wait_in_flight()
    _shut_gateway_server(gateway)
    if keep_archive:
        jvm_archive.finish_dumps()  # closes stdin and waits for a pending archive, if any
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    # In a hurry, a JVM writing its class-data archive at exit is not waited for.
    alive = _wait_gone(tree, wait if keep_archive else min(wait, 1.0))
    for stage in ("terminate", "kill") if keep_archive else ("kill",):
        if not alive:
            break
        log.warning(
            "the Spark driver's processes %s did not exit in time; %s them",
            [p.pid for p in alive],
            "terminating" if stage == "terminate" else "killing",
        )
        for p in alive:
            with contextlib.suppress(psutil.Error):
                getattr(p, stage)()
        alive = _wait_gone(alive, 2.0)
    with contextlib.suppress(Exception):
        proc.wait(1.0)  # reap it: no zombie left behind
    with SparkContext._lock:
        if SparkContext._gateway is gateway:
            _forget_jvm()
    if gateway is not None:
        with contextlib.suppress(Exception):
            gateway.close()


def _forget_jvm() -> None:
    """Put back in this process what PySpark holds before any JVM was launched, for a JVM that
    was ended (the caller holds ``SparkContext._lock``): its gateway, the context on it and the
    sessions of that context, which PySpark's own stops reset (``SparkContext.stop``,
    ``SparkSession.stop``); nothing is sent to the JVM, which is gone.

    A context stopped before the JVM ended has reset them already. One that was not (a session
    closed in a hurry: the JVM ended without it being stopped), or whose stop met the JVM
    already dead (a refused connection, which PySpark does not catch), would otherwise stay the
    process's active context and its session the default and active one: every later session
    of the process (the next run in a Dagster run worker or code server, an Airflow worker's
    next task) would get them from ``getOrCreate`` and fail on the dead JVM instead of
    launching its own. The context and session objects are left to whoever holds them (a
    stopped run's thread still winding down sees the JVM gone, as before).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession, SQLContext

    SparkContext._gateway = None
    SparkContext._jvm = None
    SparkContext._active_spark_context = None
    SparkSession._instantiatedSession = None
    SparkSession._activeSession = None
    SQLContext._instantiatedContext = None


class _Releases:
    """py4j's releases of freed JVM objects to one JVM, stopped (:func:`_stop_object_releases`).

    A release already on its way when they were stopped takes a round trip to the running JVM
    (well under a millisecond when idle, a few under load). :meth:`wait_in_flight` returns once
    the finalizer thread got past it, or :data:`IN_FLIGHT_SECONDS` after they were stopped: the
    thread sleeps a second between empty looks (nothing on its way then), and is not waited for
    to the end. An owned session stops them before its own stop (0.1 s): the JVM's end then
    waits little or not at all.
    """

    IN_FLIGHT_SECONDS = 0.1

    def __init__(self) -> None:
        import time

        self.since = time.monotonic()
        self.reached = threading.Event()

    def wait_in_flight(self) -> None:
        import time

        self.reached.wait(max(0.0, self.since + self.IN_FLIGHT_SECONDS - time.monotonic()))


def _client_and_finalizer_queue(gateway: Any) -> tuple[Any, Any]:
    """py4j's client of ``gateway`` and its finalizer thread's queue: None for the queue of a
    client without that thread (``PYSPARK_PIN_THREAD=false``), both None without a gateway."""
    client = getattr(gateway, "_gateway_client", None)
    return client, getattr(client, "finalizer_deque", None)


#: The gateway clients whose releases :func:`_stop_object_releases` stopped.
_RELEASES_STOPPED: weakref.WeakKeyDictionary[Any, _Releases] = weakref.WeakKeyDictionary()
_RELEASES_LOCK = threading.Lock()


def _stop_object_releases(gateway: Any, *, before_stop: bool) -> _Releases:
    """Stop py4j telling the JVM about the JVM objects Python frees, before the JVM is ended.

    Python's garbage collector hands py4j every JVM object it frees, by the thousand as a
    run's plans and rows go out of scope; py4j's finalizer thread sends each to the JVM as a
    command of its own. One sent while the JVM exits fails, and py4j logs that (an ERROR with
    its traceback when the JVM reset the connection) in the user's log. A JVM about to end
    needs none of them: the client is marked disconnected, which py4j's release checks before
    sending, and the finalizer thread is told to end after what it holds now (skipped from
    then on). Once per client; a later call returns the same :class:`_Releases`.

    ``before_stop``: the session is still to be stopped. Only a client with the finalizer
    thread (PySpark's pinned threads, the default) is marked then, as it sends its other
    commands whatever the mark says; a client without it (``PYSPARK_PIN_THREAD=false``: freed
    objects are sent by whichever thread freed them, checking the same mark) would refuse the
    stop's own calls, and is marked only by the call after the stop.
    """
    from py4j.clientserver import SHUTDOWN_FINALIZER_WORKER

    releases = _Releases()
    client, queue = _client_and_finalizer_queue(gateway)
    if client is None or (before_stop and queue is None):
        releases.reached.set()
        return releases
    with _RELEASES_LOCK:
        if client in _RELEASES_STOPPED:
            return _RELEASES_STOPPED[client]
        _RELEASES_STOPPED[client] = releases
    client.is_connected = False
    if queue is None:
        releases.reached.set()
        return releases

    class _Reached:
        def garbage_collect_object(self, target_id: str, enqueue: bool) -> None:
            releases.reached.set()

    # The thread takes from the right: both come after everything queued before them.
    queue.appendleft((_Reached(), ""))
    queue.appendleft(SHUTDOWN_FINALIZER_WORKER)
    return releases


def _shut_gateway_server(gateway: Any) -> None:
    """Shut the JVM's py4j server (py4j's ``JavaGateway.shutdown``) just before the JVM is ended.

    The server's threads wait on its socket and its connections in native code, and the JVM's
    exit waits out threads in native code (HotSpot gives them 300 ms) before it exits: with
    the server shut, the JVM exits 0.06 s after its stdin closes instead of 0.38 s (3 runs
    each). Only with PySpark's pinned threads (the default): a client without them was marked
    disconnected already, and would refuse to send the shutdown.
    """
    import logging

    if _client_and_finalizer_queue(gateway)[1] is None:
        return
    try:
        gateway.shutdown()
    except Exception:  # the JVM exits all the same, only later
        logging.getLogger(__name__).debug("shutting the py4j server failed", exc_info=True)


def _wait_gone(procs: list[Any], timeout: float) -> list[Any]:
    """The processes of ``procs`` still running after up to ``timeout`` seconds. An exited one
    not yet reaped by its parent (a zombie: a worker of the JVM's) counts as gone."""
    import time

    import psutil

    def running(p: Any) -> bool:
        try:
            return bool(p.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in procs if running(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)
