"""``ehingest build-reader``: compile the reader's native step for this host now.

The reader takes plain transfer frames straight to Arrow columns in C
(:mod:`dagster_eventhub_ingest.resources.eventhubs_source.fastpath.loader`). The platform wheel
ships it compiled (then this command only says so); otherwise the first process on a host that reads
events compiles it (~1-2 s, once) unless a copy for this source and this Python is already in
the cache. This command does it ahead of time: in an image build, a cluster's init script, or a CI
set-up step, so that no read task pays for it and a host that cannot build it says so at once.
"""

from __future__ import annotations

import sys

import click

__all__ = ["build_reader"]


@click.command("build-reader")
@click.option("--rebuild", is_flag=True, help="Compile it again even if a copy exists.")
def build_reader(rebuild: bool) -> None:
    """Compile the reader's native step (AMQP frames to Arrow columns) for this host."""
    from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader

    shipped = loader.packaged()
    if shipped is not None and not rebuild:
        click.echo(f"reader's native step: {shipped.__file__} (shipped compiled in the wheel)")
        return
    try:
        target, _module = loader.prepare(rebuild=rebuild, retry_failed=True)
    except Exception as exc:
        click.echo(
            f"error: the reader's native step cannot be built on this host: {exc}. Reads still "
            "work, in pure Python (~5x its CPU per event); install a C compiler and Python's "
            "headers (e.g. apt-get install gcc python3-dev), or set EHINGEST_NATIVE=0 to stop "
            "trying.",
            err=True,
        )
        sys.exit(1)
    click.echo(f"reader's native step: {target}")
