"""``ehingest spark-archive``: write the local Spark driver's class-data archive now.

A local run's JVM starts from a class-data archive
(:mod:`dagster_eventhub_ingest.resources.spark.jvm_archive`). On a host whose cache outlives its
runs, a run's process starts this command detached when it exits (``--background``); where every run
starts on a fresh host (a Kubernetes pod, Dagster+ Hybrid, most CI) nothing writes one unless this
command does it ahead of time, e.g. while building the image or in a CI set-up step, with the same
``spark:`` settings as the runs (``--config``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

__all__ = ["spark_archive"]


@click.command("spark-archive")
@click.option(
    "--config",
    "config_path",
    type=click.Path(exists=True, dir_okay=False),
    help="The runs' config file: its spark: section starts the session (default: a local one).",
)
@click.option("--rebuild", is_flag=True, help="Write it again even if it exists.")
@click.option(
    "--background",
    is_flag=True,
    hidden=True,
    help="As a run's process starts it at exit: driver settings as JSON on stdin, lowest CPU "
    "priority.",
)
@click.option("--lock-fd", type=int, hidden=True, help="The archive's lock, held for this process.")
def spark_archive(
    config_path: str | None, rebuild: bool, background: bool, lock_fd: int | None
) -> None:
    """Write the local Spark JVM's class-data archive, so runs start without loading jars."""
    from dagster_eventhub_ingest.cli.exit_codes import EXIT_CONFIG, EXIT_FAILED
    from dagster_eventhub_ingest.ops.run.warm_up import warm_up
    from dagster_eventhub_ingest.resources.errors import ConfigurationError
    from dagster_eventhub_ingest.resources.spark.jvm_archive import (
        REBUILD,
        WRITE,
        adopt_lock,
        archive_mode,
        busy_archive,
        current_plan,
        finish_dumps,
    )
    from dagster_eventhub_ingest.resources.spark.jvm_cache import cache_dir
    from dagster_eventhub_ingest.resources.spark.session import local_spark_session

    started = time.monotonic()
    try:
        if config_path is not None:
            from dagster_eventhub_ingest.cli.config import load_config

            spark_config = load_config(config_path).spark
            if not spark_config.is_local:
                raise ConfigurationError(
                    f"spark: {spark_config.engine} is not a local master; the archive is for "
                    "a local driver's JVM only (a cluster's JVMs are the cluster's)"
                )
            factory = spark_config.session_factory()
        elif background:
            _lowest_priority()
            if lock_fd is not None:
                adopt_lock(lock_fd)
            settings = {str(k): str(v) for k, v in json.loads(sys.stdin.read() or "{}").items()}
            master = settings.pop("spark.master", "local[*]")

            def factory() -> Any:
                return local_spark_session("ehingest-spark-archive", master=master, conf=settings)

        else:

            def factory() -> Any:
                return local_spark_session("ehingest-spark-archive")

    except ConfigurationError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    with archive_mode(REBUILD if rebuild else WRITE):
        spark = factory()
    plan = current_plan()
    busy = busy_archive()
    if plan is None and busy is not None:
        spark.stop()
        click.echo(f"another process is writing {busy}; runs map it once it is in place")
        return
    if plan is None and not _writable(cache_dir() / "jvm"):
        spark.stop()
        click.echo(
            f"no archive: cannot write {cache_dir() / 'jvm'} (set EHINGEST_CACHE_DIR to a "
            "writable directory); runs start without one",
            err=True,
        )
        sys.exit(EXIT_FAILED)
    if plan is None:
        click.echo(
            "no archive: the driver's class path or Java options rule it out (a "
            "SPARK_CONF_DIR, HADOOP_CONF_DIR or extra class path of yours, Java options that "
            "set class data sharing; docs/deploy.md)",
            err=True,
        )
        sys.exit(EXIT_FAILED)
    if plan.dump_to is None:
        click.echo(f"up to date: {plan.archive} (--rebuild writes it again)")
        return
    with tempfile.TemporaryDirectory(prefix="ehingest-archive-") as tmp:
        warm_up(spark, Path(tmp))
        spark.stop()
    if plan.archive not in finish_dumps():
        click.echo(f"error: the JVM did not write {plan.archive}", err=True)
        sys.exit(EXIT_FAILED)
    size = plan.archive.stat().st_size / 2**20
    click.echo(f"wrote {plan.archive} ({size:.0f} MB) in {time.monotonic() - started:.1f} s")


def _writable(directory: Path) -> bool:
    """Whether ``directory`` exists (or can be made) and takes a new file."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def _lowest_priority() -> None:
    """This process (and the JVM it starts) yields the CPU and the disk to whatever runs next.

    Best effort, Linux: the lowest nice value and the idle scheduling class; the idle I/O class;
    and, when it leads a session of its own (as :func:`spawn_builder` starts it; never a shell's
    session), the nice value of that session's autogroup: with ``kernel.sched_autogroup_enabled``
    (most desktop and many server kernels) the CPU is shared between sessions first. Measured on
    2 cores with the process's nice value alone: the two runs started while it wrote took 22-24 s
    against 16 s for the one before them (none of the three had an archive).
    """
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if os.getsid(0) == os.getpid():  # a session of its own (spawn_builder's): its autogroup
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text("19")
    with contextlib.suppress(Exception):
        import psutil

        psutil.Process().ionice(psutil.IOPRIO_CLASS_IDLE)
