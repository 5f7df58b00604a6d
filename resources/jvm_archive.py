"""A local Spark driver's JVM started from a class-data archive (JDK AppCDS), not from jars.

A local session's JVM loads ~15,000 classes from Spark's ~250 jars, verifying and linking each:
most of its start (JVM, SparkContext, SparkSession: 4-7 s on 2 cores) and a good part of the
first job. JDK 13+ can write every class a JVM loaded into an archive when it exits
(``-XX:ArchiveClassesAtExit``) and map that archive at the next start
(``-XX:SharedArchiveFile``): a cold ``ehingest run`` of 100k events took 16.1-16.6 s without
and 12.2-12.5 s with it (docs/deploy.md, "Local runs").

How it is used (local masters only; a cluster's or Spark Connect's JVMs are not ours to start):

* :func:`plan_archive` decides, before the JVM starts, from the driver's Java options and the
  environment: with an archive for this Java, this Spark and these options, the JVM maps it;
  without one, the second JVM to want it writes it when it exits (the first leaves a note: a
  cache that is still there at the next run is one worth filling; a container started fresh
  for every run never pays for writing an archive it would throw away). The archive lives in
  :func:`cache_dir` (``$EHINGEST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ehingest``, else
  ``~/.cache/ehingest``), ~150-200 MB, named by a hash of what it depends on.
  ``EHINGEST_JVM_ARCHIVE`` (:data:`ARCHIVE_ENV`) turns it off, to using an archive without
  ever writing one, or to writing it now (``ehingest spark-archive``).
* The JDK refuses to write an archive when the class path holds a non-empty directory, and
  Spark's launcher puts ``SPARK_CONF_DIR`` on it. So the package's quiet log4j2 config is passed
  as ``-Dlog4j2.configurationFile`` and ``SPARK_CONF_DIR`` points at an empty directory; a
  ``SPARK_CONF_DIR`` of the user's, ``HADOOP_CONF_DIR``, ``YARN_CONF_DIR``,
  ``SPARK_DIST_CLASSPATH`` or ``spark.driver.extraClassPath`` (class path entries of theirs)
  turn the archive off instead of changing them.
* The archive is written to a temporary name; :func:`finish_dumps` (at interpreter exit) closes
  the JVM's stdin, which ends it, waits for it to write the archive and renames it into place
  only if the JVM exited cleanly. A JVM that dies mid-write leaves a temporary file that a later
  plan removes; two first runs at once each write their own and the last rename wins. A JVM
  that refuses the options (an unusual class path) is restarted without them at once
  (:func:`start_with_archive`), and that key is then never tried again.

The JVM itself checks that an archive matches its build and class path and silently starts
without it otherwise, so a stale or damaged archive costs the gain, never the run; the run then
finds it unmapped in the JVM's memory map, removes it and notes its hash unusable.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

logger = logging.getLogger(__name__)

__all__ = [
    "ARCHIVE_ENV",
    "CACHE_DIR_ENV",
    "REBUILD",
    "USE_ONLY",
    "WRITE",
    "ArchivePlan",
    "archive_mode",
    "cache_dir",
    "current_plan",
    "finish_dump",
    "finish_dumps",
    "gateway_process",
    "plan_archive",
    "start_with_archive",
    "switched_off",
]

#: Unset (or ``auto``): a JVM maps the archive; without one, the second JVM to want it writes
#: it. ``off`` (or ``0``, ``false``, ``no``): neither. ``use``: map it, never write one (e.g.
#: many short-lived JVMs while ``ehingest spark-archive`` writes it). ``write``: write it now if
#: there is none. ``rebuild``: write it again.
ARCHIVE_ENV = "EHINGEST_JVM_ARCHIVE"
USE_ONLY = "use"
WRITE = "write"
REBUILD = "rebuild"
#: Where the package keeps what it caches on this machine (default: the XDG cache directory).
CACHE_DIR_ENV = "EHINGEST_CACHE_DIR"
#: :data:`ARCHIVE_ENV`'s value as :func:`archive_mode` sets it for a block (None: the variable's).
_MODE: ContextVar[str | None] = ContextVar("ehingest_jvm_archive_mode", default=None)

#: Environment variables whose entries Spark's launcher puts on the driver's class path.
_CLASS_PATH_ENV = ("HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH")
#: Java options of a user's that already decide about class data sharing.
_OWN_SHARING = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare", "SharedClassListFile")
#: Seconds the exit waits for the JVM to write its archive before giving up on it.
_DUMP_WAIT_SECONDS = 180.0
#: A temporary archive older than this belongs to a JVM that is gone.
_STALE_SECONDS = 3600.0

T = TypeVar("T")


@dataclass(frozen=True)
class ArchivePlan:
    """What a local driver's JVM gets: Java options, its ``SPARK_CONF_DIR``, and whether it
    maps an archive (``dump_to`` None) or writes one at exit to ``dump_to``."""

    archive: Path
    java_options: str
    conf_dir: Path
    dump_to: Path | None

    @property
    def marker(self) -> Path:
        """Exists when this key's JVM refused the options once: never tried again."""
        return self.archive.with_suffix(".unusable")


def switched_off(value: str | None) -> bool:
    """Whether an ``EHINGEST_*`` switch's value turns its feature off (``off``, ``0``,
    ``false``, ``no``; any case)."""
    return (value or "").strip().lower() in ("off", "0", "false", "no")


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


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The package's cache directory on this machine (not created here)."""
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ehingest"


def _java(env: Mapping[str, str]) -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = env.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.realpath(found))


def _fingerprint(java: Path, java_options: str, driver_memory: str, env: Mapping[str, str]) -> str:
    """A hash of what an archive is valid for: the JVM build, Spark's jars (where they are,
    their names and sizes), the JVM's flags and heap size (past 32 GB the JVM stops compressing
    pointers)."""
    import pyspark

    digest = hashlib.sha256()
    digest.update(str(java).encode())
    release = java.parent.parent / "release"  # JAVA_HOME/release names the exact build
    with contextlib.suppress(OSError):
        digest.update(release.read_bytes())
    with contextlib.suppress(OSError):
        digest.update(str(java.stat().st_mtime_ns).encode())
    # The archive records the class path it was written with (absolute jar paths): another
    # install of the same Spark (a second virtualenv, a CI checkout) needs its own.
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    digest.update(str(jars).encode())
    with contextlib.suppress(OSError):
        for jar in sorted(jars.iterdir()):
            digest.update(f"{jar.name}:{jar.stat().st_size}".encode())
    digest.update(pyspark.__version__.encode())
    for options in (java_options, env.get("SPARK_SUBMIT_OPTS", "")):
        digest.update(" ".join(_jvm_flags(options)).encode() + b"\0")
    digest.update(driver_memory.encode())
    return digest.hexdigest()[:20]


def _jvm_flags(options: str) -> list[str]:
    """The JVM flags of a Java options string, without system properties (``-Dkey=value``:
    a warehouse's Derby home differs per session and does not change which classes load)."""
    try:
        tokens = shlex.split(options)
    except ValueError:
        tokens = options.split()
    return [t for t in tokens if not t.startswith("-D")]


def _remove_stale(directory: Path) -> None:
    now = time.time()
    for tmp in directory.glob("*.jsa.*.tmp"):
        with contextlib.suppress(OSError):
            if now - tmp.stat().st_mtime > _STALE_SECONDS:
                tmp.unlink()


def plan_archive(
    java_options: str,
    conf: Mapping[str, str],
    *,
    log4j_config: Path,
    default_conf_dir: Path,
    env: Mapping[str, str] = os.environ,
) -> ArchivePlan | None:
    """The archive plan of a local driver JVM about to start, or None (start it as before).

    ``java_options`` are the driver's ``spark.driver.extraJavaOptions`` as they will be;
    ``conf`` the session's conf (for ``spark.driver.extraClassPath``); ``default_conf_dir`` the
    package's ``SPARK_CONF_DIR`` (holding ``log4j_config``), the only one it replaces.
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
    java = _java(env)
    if java is None:
        return None
    key = _fingerprint(java, java_options, conf.get("spark.driver.memory", ""), env)
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
    quiet = f"-Dlog4j2.configurationFile={log4j_config.resolve().as_uri()}"
    if archive.with_suffix(".unusable").exists():
        return None
    if archive.is_file() and mode != REBUILD:
        with contextlib.suppress(OSError):
            if time.time() - archive.stat().st_mtime > 86400:
                os.utime(archive)  # in use: keeps it from looking abandoned
        return ArchivePlan(
            archive, f"{quiet} -XX:SharedArchiveFile={archive} -Xlog:cds=off", empty, None
        )
    if mode == USE_ONLY:
        return None
    wanted = archive.with_suffix(".wanted")
    if mode not in (WRITE, REBUILD) and not wanted.exists():
        # The first JVM here only notes that it would have used one: writing it costs that
        # run ~20 s, worth it only where the cache outlives the run. A container started
        # fresh for every run never gets further (bake the archive into its image instead).
        with contextlib.suppress(OSError):
            wanted.touch()
        return None
    _remove_stale(directory)
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

    On success with ``plan.dump_to``, :func:`finish_dump` runs at interpreter exit.
    """
    global _CURRENT
    if plan is None:
        return start(None)
    try:
        started = start(plan)
    except Exception as exc:
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
        # The JVM checked the archive and started without it (it was written by another JVM
        # build or for another class path, or is damaged): a note keeps later runs from
        # paying for it again; removing both lets the second run from now write a new one.
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
#: The plan this process's JVM started with (None: without an archive, or no JVM yet).
_CURRENT: ArchivePlan | None = None


def current_plan() -> ArchivePlan | None:
    """The archive plan this process's Spark JVM started with, if it started with one."""
    return _CURRENT


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
    a JVM that exited with 0 within ``wait`` seconds has its archive renamed into place.
    Returns whether it was.
    """
    if plan.dump_to is None:
        return False
    proc = gateway_process()
    if proc is not None and proc.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(wait)
        except Exception:
            logger.debug("the Spark JVM did not exit in %.0f s; no archive written", wait)
            return False
    if proc is None or proc.returncode != 0 or not plan.dump_to.is_file():
        with contextlib.suppress(OSError):
            plan.dump_to.unlink()
        return False
    try:
        os.replace(plan.dump_to, plan.archive)
    except OSError as exc:
        logger.debug("could not keep the JVM class-data archive %s: %s", plan.archive, exc)
        return False
    logger.info("wrote the local Spark JVM's class-data archive %s", plan.archive)
    return True


def gateway_process() -> Any:
    """The ``Popen`` of the JVM this process launched for PySpark, or None."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    return getattr(gateway, "proc", None) if gateway is not None else None
