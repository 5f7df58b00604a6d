"""The class-data archive cache on this machine: where it is, what an archive is keyed by, one
writer per archive, and a bound on what it keeps.

The JVM archives (:mod:`dagster_eventhub_ingest.resources.spark.jvm_archive` plans and writes
them) live in :func:`cache_dir` (``$EHINGEST_CACHE_DIR``, else ``$XDG_CACHE_HOME/ehingest``, else
``~/.cache/ehingest``) under ``jvm/``, ~150-200 MB each, named ``spark-<key>.jsa`` by a hash of
what the archive depends on (:func:`archive_key`: the Java build, Spark's jars, the JVM's flags).

* One writer per archive: a JVM that writes holds ``spark-<key>.lock`` (an :class:`ArchiveLock`,
  ``flock``; released by the kernel when its process dies) from before it starts until its
  archive is renamed into place; a process that finds the lock held starts without writing.
* Bounded (:func:`tidy`, at every plan): temporary dumps no live writer holds are removed, at
  most :data:`KEEP_ARCHIVES` archives are kept (the most recently used; a run that maps one
  marks it used), none unused for :data:`UNUSED_SECONDS`, and notes as old go too. Removing an
  archive another JVM has mapped is safe (the mapping stays); a JVM that finds it gone starts
  without it.
* Never a failure: a cache directory that cannot be written or a lock that cannot be taken
  cost the gain, never the run.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shlex
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "CACHE_DIR_ENV",
    "KEEP_ARCHIVES",
    "UNUSED_SECONDS",
    "ArchiveLock",
    "archive_key",
    "cache_dir",
    "find_java",
    "switched_off",
    "tidy",
]

#: Where the package keeps what it caches on this machine (default: the XDG cache directory).
CACHE_DIR_ENV = "EHINGEST_CACHE_DIR"
#: Archives kept per cache directory (one per Java build, Spark install and JVM flags; the most
#: recently used stay): a host with a few virtualenvs keeps theirs, not every one it ever had.
KEEP_ARCHIVES = 3
#: An archive (or a note) no run has used for this long is removed.
UNUSED_SECONDS = 14 * 86400.0
#: Where locks cannot be taken (some network file systems), a temporary archive older than this
#: belongs to a JVM that is gone.
_STALE_SECONDS = 3600.0


def switched_on(value: str | None) -> bool:
    """Whether an ``EHINGEST_*`` switch's value turns its feature on (``on``, ``1``, ``true``,
    ``yes``; any case)."""
    return (value or "").strip().lower() in ("on", "1", "true", "yes")


def switched_off(value: str | None) -> bool:
    """Whether an ``EHINGEST_*`` switch's value turns its feature off (``off``, ``0``,
    ``false``, ``no``; any case)."""
    return (value or "").strip().lower() in ("off", "0", "false", "no")


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """The package's cache directory on this machine (not created here)."""
    if env.get(CACHE_DIR_ENV):
        return Path(env[CACHE_DIR_ENV])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ehingest"


def find_java(env: Mapping[str, str]) -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = env.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        return None
    return Path(os.path.realpath(found))


def archive_key(
    java: Path,
    java_options: str,
    driver_memory: str,
    env: Mapping[str, str],
    class_path: str = "",
) -> str:
    """A hash of what an archive is valid for: the JVM build, Spark's jars (where they are,
    their names and sizes), the JVM's flags and heap size (past 32 GB the JVM stops compressing
    pointers), and the jars put before Spark's (the JVM maps an archive only for the class path
    it was written with)."""
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
    digest.update(b"\0" + class_path.encode())
    return digest.hexdigest()[:20]


def _jvm_flags(options: str) -> list[str]:
    """The JVM flags of a Java options string, without system properties (``-Dkey=value``:
    a warehouse's Derby home differs per session and does not change which classes load)."""
    try:
        tokens = shlex.split(options)
    except ValueError:
        tokens = options.split()
    return [t for t in tokens if not t.startswith("-D")]


class ArchiveLock:
    """An exclusive ``flock`` on a file, taken without waiting; released by :meth:`release` or
    by the kernel when the process ends (a writer that dies frees its archive for the next)."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    @classmethod
    def take(cls, path: Path) -> ArchiveLock | None:
        """The lock, or None while another process (or another lock of this one) holds it.
        Raises OSError where the file cannot be opened or locks are not supported."""
        import fcntl

        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            raise
        with contextlib.suppress(OSError):
            os.utime(fd)  # a lock file's age is its key's last write
        return cls(fd)

    def release(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)  # closing the only descriptor releases the flock
            self.fd = None


def _writer_gone(directory: Path, tmp: Path, now: float) -> bool:
    """Whether no live process writes the temporary archive ``tmp`` (its key's lock is free)."""
    key = tmp.name.split(".jsa.", 1)[0]
    try:
        lock = ArchiveLock.take(directory / f"{key}.lock")
    except OSError:  # no locks here: judge by age
        try:
            return now - tmp.stat().st_mtime > _STALE_SECONDS
        except OSError:
            return False
    if lock is None:
        return False
    lock.release()
    return True


def tidy(directory: Path, *, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Keep the archive cache ``directory`` bounded; the files removed.

    Temporary archives no live writer holds (a JVM or process that died mid-write), archives
    past the :data:`KEEP_ARCHIVES` most recently used or unused for :data:`UNUSED_SECONDS`, and
    notes (``.unusable``, ``.lock``, ``.log``; ``.wanted`` of earlier versions) as old. ``keep``
    (the archive about to be used) stays whatever its age. Best effort: what cannot be removed
    stays.
    """
    now = time.time() if now is None else now
    removed: list[Path] = []

    def remove(path: Path) -> None:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)

    def age(path: Path) -> float:
        try:
            return now - path.stat().st_mtime
        except OSError:
            return 0.0

    try:
        names = sorted(directory.iterdir())
    except OSError:
        return removed
    for tmp in (p for p in names if p.name.endswith(".tmp") and ".jsa." in p.name):
        if _writer_gone(directory, tmp, now):
            remove(tmp)
    archives = sorted(
        (p for p in names if p.suffix == ".jsa" and p != keep), key=age
    )  # most recently used first
    budget = KEEP_ARCHIVES - (1 if keep is not None and keep.exists() else 0)
    for i, archive in enumerate(archives):
        if i >= budget or age(archive) > UNUSED_SECONDS:
            remove(archive)
    kept = keep.stem if keep is not None else None
    notes = (".wanted", ".unusable", ".lock", ".log")
    for note in (p for p in names if p.suffix in notes and p.stem != kept):
        if age(note) > UNUSED_SECONDS and not note.with_suffix(".jsa").exists():
            remove(note)
    return removed
