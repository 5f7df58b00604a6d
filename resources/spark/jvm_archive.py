"""A local Spark driver's JVM started from a class-data archive (JDK AppCDS), not from jars.

A local session's JVM loads ~15,000 classes from Spark's ~250 jars, verifying and linking each:
most of its start (JVM, SparkContext, SparkSession: 4-7 s on 2 cores) and a good part of the
first job. JDK 13+ can write every class a JVM loaded into an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map that archive at the next start
(``-XX:SharedArchiveFile``): a cold ``ehingest run`` of 100k events is ~1.3x faster with it
(docs/benchmarks.md).

How it is used (local masters only; a cluster's or Spark Connect's JVMs are not ours to start).
Where archives live, what they are keyed by, their locks and their bound are
:mod:`dagster_eventhub_ingest.resources.spark.jvm_cache`'s; this module plans, launches and
writes:

* :func:`plan_archive` decides, before the JVM starts, from the driver's Java options and the
  environment: with an archive for this Java, this Spark and these options, the JVM maps it.
  Without one, no run writes it on its own time, and by default nothing a run starts outlives
  it: the archive is written by ``ehingest spark-archive`` (an image build, an install step,
  the test command). With ``EHINGEST_JVM_ARCHIVE=auto`` a run's process starts, when it exits,
  a detached, lowest-priority ``ehingest spark-archive --background`` (:func:`spawn_builder`)
  that writes it (~30-40 s of CPU) for the runs after. ``EHINGEST_JVM_ARCHIVE``
  (:data:`ARCHIVE_ENV`) turns it off, or has it written after a run or in the run's own JVM.
* The JDK refuses to write an archive when the class path holds a non-empty directory, and
  Spark's launcher puts ``SPARK_CONF_DIR`` on it. So the package's quiet log4j2 config is passed
  as ``-Dlog4j2.configurationFile`` and ``SPARK_CONF_DIR`` points at an empty directory; a
  ``SPARK_CONF_DIR`` of the user's, ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR``,
  ``SPARK_DIST_CLASSPATH`` or ``spark.driver.extraClassPath`` (class path entries of theirs)
  turn the archive off instead of changing them.
* A JVM that writes holds the archive's lock from before it starts; the archive is written to a
  temporary name; :func:`finish_dump` closes the JVM's stdin, which ends it, waits for it to
  write the archive and renames it into place only if the JVM exited cleanly. A JVM that
  refuses the options (an unusual class path) is restarted without them at once
  (:func:`start_with_archive`), and that key is then never tried again.
* Never a failure: a dump that fails or a builder that dies cost the gain, never the run.

The JVM itself checks that an archive matches its build and class path and silently starts
without it otherwise, so a stale or damaged archive costs the gain, never the run; the run then
finds it unmapped in the JVM's memory map, removes it and notes its hash unusable.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dagster_eventhub_ingest.resources.spark.jvm_cache import (
    CACHE_DIR_ENV,
    ArchiveLock,
    archive_key,
    cache_dir,
    find_java,
    switched_off,
    tidy,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ARCHIVE_ENV",
    "AUTO",
    "BUILDER_COMMAND",
    "REBUILD",
    "USE_ONLY",
    "WRITE",
    "ArchivePlan",
    "adopt_lock",
    "archive_mode",
    "busy_archive",
    "current_plan",
    "finish_dump",
    "finish_dumps",
    "gateway_process",
    "plan_archive",
    "spawn_builder",
    "start_with_archive",
]

#: Unset (or ``use``): a JVM maps the archive if there is one and never writes one, so nothing
#: a run starts outlives it (the archive comes from ``ehingest spark-archive``: an image build,
#: an install step). ``auto``: without one, a detached lowest-priority process writes it after
#: the run's process exits (a long-lived host that wants it without an install step).
#: ``off`` (or ``0``, ``false``, ``no``): neither map nor write. ``write``: the run's own JVM
#: writes it at its exit if there is none (that run pays ~20 s). ``rebuild``: write it again.
ARCHIVE_ENV = "EHINGEST_JVM_ARCHIVE"
USE_ONLY = "use"
AUTO = "auto"
WRITE = "write"
REBUILD = "rebuild"
#: The command a run's process starts, detached, to write the archive after it exits: the CLI's
#: ``spark-archive`` (it warms a session up along a run's path, which this layer cannot import).
BUILDER_COMMAND = ("-m", "dagster_eventhub_ingest.cli.main", "spark-archive", "--background")
#: :data:`ARCHIVE_ENV`'s value as :func:`archive_mode` sets it for a block (None: the variable's).
_MODE: ContextVar[str | None] = ContextVar("ehingest_jvm_archive_mode", default=None)

#: Environment variables whose entries Spark's launcher puts on the driver's class path.
_CLASS_PATH_ENV = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")
#: Java options of a user's that already decide about class data sharing.
_OWN_SHARING = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare", "SharedClassListFile")
#: Seconds a writer waits for its JVM to write the archive (nobody waits on a writer: it is
#: ``ehingest spark-archive`` or the detached builder; a loaded host can take minutes).
_DUMP_WAIT_SECONDS = 1200.0
#: A mapped archive's modification time is its last use, refreshed at most this often.
_TOUCH_SECONDS = 3600.0
#: The driver settings (with its Java options) the detached builder needs to write the archive
#: a run would map.
_BUILD_SETTINGS = ("spark.master", "spark.driver.memory")

T = TypeVar("T")


@dataclass(frozen=True)
class ArchivePlan:
    """What a local driver's JVM gets: Java options, its ``SPARK_CONF_DIR``, and whether it
    maps an archive (``dump_to`` None) or writes one at exit to ``dump_to``.

    ``build_later``: there is no archive yet and the JVM starts without one; once this process
    exits, a detached builder writes it with ``settings`` (:func:`spawn_builder`).
    """

    archive: Path
    java_options: str
    conf_dir: Path
    dump_to: Path | None
    build_later: bool = False
    settings: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def marker(self) -> Path:
        """Exists when this key's JVM refused the options once: never tried again."""
        return self.archive.with_suffix(".unusable")

    @property
    def lock(self) -> Path:
        """Held (``flock``) by the one process writing this archive."""
        return self.archive.with_suffix(".lock")


@contextlib.contextmanager
def archive_mode(mode: str) -> Iterator[None]:
    """Sessions started in this block (this thread) plan as if :data:`ARCHIVE_ENV` were
    ``mode`` (``ehingest spark-archive``: :data:`WRITE` or :data:`REBUILD`); the environment
    is left alone."""
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def plan_archive(
    java_options: str,
    conf: Mapping[str, str],
    *,
    log4j_config: Path,
    default_conf_dir: Path,
    class_path: str = "",
    env: Mapping[str, str] = os.environ,
) -> ArchivePlan | None:
    """The archive plan of a local driver JVM about to start, or None (start it as before).

    ``java_options`` are the driver's ``spark.driver.extraJavaOptions`` as they will be;
    ``conf`` the session's conf (for ``spark.driver.extraClassPath``); ``default_conf_dir`` the
    package's ``SPARK_CONF_DIR`` (holding ``log4j_config``), the only one it replaces;
    ``class_path`` what this package puts before Spark's jars
    (:mod:`dagster_eventhub_ingest.resources.spark.class_path`). The cache directory is tidied
    on the way (:func:`tidy`).
    """
    mode = (_MODE.get() or env.get(ARCHIVE_ENV, "")).strip().lower()
    if switched_off(mode):
        return None
    if any(marker in java_options for marker in _OWN_SHARING):
        return None
    conf_dir = env.get("SPARK_CONF_DIR")
    if conf_dir and Path(conf_dir) != default_conf_dir:
        return None  # the user's Spark conf directory: not ours to replace
    if any(env.get(name) for name in _CLASS_PATH_ENV) or conf.get("spark.driver.extraClassPath"):
        return None
    java = find_java(env)
    if java is None:
        return None
    key = archive_key(java, java_options, conf.get("spark.driver.memory", ""), env, class_path)
    directory = cache_dir(env) / "jvm"
    empty = directory / "conf"
    try:
        empty.mkdir(parents=True, exist_ok=True)
        if any(empty.iterdir()):
            return None  # someone put files there: it would not be empty on the class path
    except OSError as exc:
        logger.debug("no JVM class-data archive: cannot use %s: %s", directory, exc)
        return None
    archive = directory / f"spark-{key}.jsa"
    tidy(directory, keep=archive)
    quiet = f"-Dlog4j2.configurationFile={log4j_config.resolve().as_uri()}"
    if archive.with_suffix(".unusable").exists():
        return None
    if archive.is_file() and mode != REBUILD:
        with contextlib.suppress(OSError):
            if time.time() - archive.stat().st_mtime > _TOUCH_SECONDS:
                os.utime(archive)  # its last use: the most recently used archives are kept
        return ArchivePlan(
            archive, f"{quiet} -XX:SharedArchiveFile={archive} -Xlog:cds=off", empty, None
        )
    if mode not in (AUTO, WRITE, REBUILD):
        return None  # the default (and ``use``): nothing is written, nothing outlives the run
    if mode == AUTO:
        # Written after this run, off its critical path. In a container thrown away with the
        # run the writer goes with it, having cost the run nothing (bake it into the image).
        settings = (
            *((k, conf[k]) for k in _BUILD_SETTINGS if k in conf),
            ("spark.driver.extraJavaOptions", java_options),
        )
        return ArchivePlan(archive, "", empty, None, build_later=True, settings=settings)
    dump_to = directory / f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    return ArchivePlan(
        archive,
        # The JDK lists classes it cannot archive (signed jars, old bytecode) as warnings.
        f"{quiet} -XX:ArchiveClassesAtExit={dump_to} -Xlog:cds=off -Xlog:cds+dynamic=off",
        empty,
        dump_to,
    )


def start_with_archive(plan: ArchivePlan | None, start: Callable[[ArchivePlan | None], T]) -> T:
    """``start(plan)`` (which launches the JVM with ``plan``'s Java options and
    ``SPARK_CONF_DIR=plan.conf_dir``); once more with None if that failed (a JVM that starts
    without the archive's options marks the key unusable; one that does not start either raises
    its own error).

    A plan to write (``plan.dump_to``) first takes the archive's lock: while another process
    writes it, the JVM starts without the options (:func:`busy_archive` names it). On success
    :func:`finish_dump` runs at interpreter exit. A plan to ``build_later`` starts the JVM as
    without a plan and starts :func:`spawn_builder` at interpreter exit.
    """
    global _CURRENT, _BUSY
    if plan is None:
        return start(None)
    if plan.build_later:
        started = start(None)
        if not _LATER:
            atexit.register(_spawn_builders)
        if plan.archive not in {p.archive for p in _LATER}:
            _LATER.append(plan)
        return started
    lock = None
    if plan.dump_to is not None:
        try:
            lock = _adopted_for(plan.lock) or ArchiveLock.take(plan.lock)
        except OSError as exc:
            logger.debug("cannot lock %s (%s); writing without a lock", plan.lock, exc)
        else:
            if lock is None:
                _BUSY = plan.archive
                logger.info("another process writes %s; this JVM starts without it", plan.archive)
                return start(None)
    try:
        started = start(plan)
    except Exception as exc:
        if lock is not None:
            lock.release()
        started = start(None)  # raises on its own if the JVM cannot start at all
        logger.warning(
            "the local Spark JVM did not start with a class-data archive (%s); it starts "
            "without one from now on (remove %s to try again)",
            type(exc).__name__,
            plan.marker,
        )
        with contextlib.suppress(OSError):
            plan.marker.touch()
        return started
    if plan.dump_to is None and not _mapped(plan.archive):
        if not plan.archive.exists():
            return started  # removed since it was planned (tidied): nothing wrong with it
        # The JVM checked the archive and started without it (it was written by another JVM
        # build or for another class path, or is damaged): a note keeps later runs from
        # paying for it again; removing both lets a later run write a new one.
        logger.warning(
            "the local Spark JVM did not use its class-data archive %s; it is removed and "
            "runs start without one (remove %s to have the next runs write a new one)",
            plan.archive,
            plan.marker,
        )
        with contextlib.suppress(OSError):
            plan.marker.touch()
            plan.archive.unlink()
        return started
    _CURRENT = plan
    if plan.dump_to is not None:
        if not _PENDING:
            atexit.register(finish_dumps)
        _PENDING.append(plan)
        if lock is not None:
            _LOCKS[plan.dump_to] = lock
    return started


def _mapped(archive: Path) -> bool:
    """Whether this process's Spark JVM has ``archive`` mapped (True where it cannot tell)."""
    proc = gateway_process()
    maps = Path(f"/proc/{getattr(proc, 'pid', '-')}/maps")
    try:
        return str(archive) in maps.read_text()
    except OSError:  # not Linux, or no JVM of ours: cannot tell
        return True


#: Plans whose JVM writes an archive at exit, not put in place yet (:func:`finish_dumps`).
_PENDING: list[ArchivePlan] = []
#: The locks of those plans, by ``dump_to``.
_LOCKS: dict[Path, ArchiveLock] = {}
#: Plans whose archive a detached builder writes once this process exits.
_LATER: list[ArchivePlan] = []
#: The plan this process's JVM started with (None: without an archive, or no JVM yet).
_CURRENT: ArchivePlan | None = None
#: The archive another process was writing when this one wanted to (None: none).
_BUSY: Path | None = None
#: A lock :func:`spawn_builder` passed this process (:func:`adopt_lock`), not used yet.
_ADOPTED: ArchiveLock | None = None


def current_plan() -> ArchivePlan | None:
    """The archive plan this process's Spark JVM started with, if it started with one."""
    return _CURRENT


def busy_archive() -> Path | None:
    """The archive this process wanted to write while another process was writing it."""
    return _BUSY


def finish_dumps() -> list[Path]:
    """:func:`finish_dump` for every JVM of this process that writes an archive: the archives
    put in place. Runs at interpreter exit; a command may call it earlier (the JVM ends)."""
    done: list[Path] = []
    while _PENDING:
        plan = _PENDING.pop()
        if finish_dump(plan):
            done.append(plan.archive)
    return done


def finish_dump(plan: ArchivePlan, wait: float = _DUMP_WAIT_SECONDS) -> bool:
    """End this process's Spark JVM, let it write its archive, and put the archive in place.

    Runs at interpreter exit (the session is done by then). Closing the JVM's stdin is how
    PySpark's gateway JVM learns its driver is gone; it then exits, writing the archive. Only
    a JVM that exited with 0 within ``wait`` seconds has its archive renamed into place (an
    atomic rename: a JVM starting meanwhile maps the old archive or the new one, never half of
    one). Returns whether it was. The archive's lock is released either way.
    """
    if plan.dump_to is None:
        return False
    try:
        return _finish_dump(plan, plan.dump_to, wait)
    finally:
        lock = _LOCKS.pop(plan.dump_to, None)
        if lock is not None:
            lock.release()


def _finish_dump(plan: ArchivePlan, dump_to: Path, wait: float) -> bool:
    proc = gateway_process()
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(wait)
        except Exception:
            logger.warning("the Spark JVM did not write its archive in %.0f s; none kept", wait)
            return False
    if proc is None or proc.returncode != 0 or not dump_to.is_file():
        with contextlib.suppress(OSError):
            dump_to.unlink()
        return False
    try:
        os.replace(dump_to, plan.archive)
    except OSError as exc:
        logger.warning("could not keep the JVM class-data archive %s: %s", plan.archive, exc)
        with contextlib.suppress(OSError):
            dump_to.unlink()
        return False
    logger.info("wrote the local Spark JVM's class-data archive %s", plan.archive)
    return True


def _spawn_builders() -> None:
    while _LATER:
        spawn_builder(_LATER.pop())


def spawn_builder(
    plan: ArchivePlan, env: Mapping[str, str] = os.environ
) -> subprocess.Popen[bytes] | None:
    """Start a detached ``ehingest spark-archive --background`` writing ``plan``'s archive with
    its driver settings (read from its stdin, never its command line), or None when there is
    nothing to do or it cannot start.

    Runs at interpreter exit, after the run's work: its own session, at the lowest CPU
    priority, in a session of its own (a signal to the run's process group does not reach it),
    its output in ``spark-<hash>.log`` beside the archive. It ends by itself (at most
    :data:`_DUMP_WAIT_SECONDS` for the JVM to write); nothing waits for it.
    """
    if plan.archive.exists():
        return None
    try:
        lock = ArchiveLock.take(plan.lock)
    except OSError:
        lock = None  # no locks here: the builder's own start decides
    else:
        if lock is None:
            return None  # a writer is at it
    # The lock goes to the builder (the same open file, so the same flock): from this moment
    # on a process that exits and wants the archive finds it held and starts no second one.
    command = [sys.executable, *BUILDER_COMMAND]
    if lock is not None and lock.fd is not None:
        command += ["--lock-fd", str(lock.fd)]
    try:
        with plan.archive.with_suffix(".log").open("wb") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Its plan's cache directory, whatever the environment says.
                env={**env, CACHE_DIR_ENV: str(plan.archive.parent.parent)},
                start_new_session=True,
                close_fds=True,
                pass_fds=() if lock is None or lock.fd is None else (lock.fd,),
            )
    except OSError as exc:
        logger.debug("could not start the archive builder for %s: %s", plan.archive, exc)
        return None
    finally:
        if lock is not None:
            lock.release()  # this process's copy; the builder holds its own
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(json.dumps(dict(plan.settings)).encode())
        proc.stdin.close()
    logger.info(
        "writing the local Spark JVM's class-data archive %s in the background", plan.archive
    )
    return proc


def adopt_lock(fd: int) -> None:
    """This process holds an archive's lock on ``fd``, passed by :func:`spawn_builder`: the
    next plan to write that archive uses it instead of taking the lock again (which a second
    open file would be refused)."""
    global _ADOPTED
    _ADOPTED = ArchiveLock(fd)


def _adopted_for(path: Path) -> ArchiveLock | None:
    """The adopted lock if it is ``path``'s (then no longer adopted), else None."""
    global _ADOPTED
    lock, _ADOPTED = _ADOPTED, None
    if lock is None or lock.fd is None:
        return None
    try:
        mine, there = os.fstat(lock.fd), os.stat(path)
    except OSError:
        lock.release()
        return None
    if (mine.st_dev, mine.st_ino) != (there.st_dev, there.st_ino):
        lock.release()
        return None
    return lock


def gateway_process() -> Any:
    """The ``Popen`` of the JVM this process launched for PySpark, or None."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None
