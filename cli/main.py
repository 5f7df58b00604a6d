"""The ``ehingest`` command line: one group, subcommands in their own modules.

Subcommands are imported lazily so ``ehingest emulator serve`` does not pay for importing
pyspark or dagster. To add one, add ``"name": "cli.module:command"`` to ``SUBCOMMANDS``. The
``emulator`` group is the emulator's own (``emulator/cli.py``).
"""

from __future__ import annotations

import importlib
import logging

import click

__all__ = ["main"]

SUBCOMMANDS: dict[str, str] = {
    "build-reader": "dagster_eventhub_ingest.cli.build_reader:build_reader",
    "emulator": "dagster_eventhub_ingest.emulator.cli:emulator",
    "simulate": "dagster_eventhub_ingest.cli.simulate:simulate",
    "run": "dagster_eventhub_ingest.cli.run:run",
    "spark-archive": "dagster_eventhub_ingest.cli.spark_archive:spark_archive",
    "status": "dagster_eventhub_ingest.cli.status:status",
}


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module only when it is invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup)
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Land Azure Event Hubs events into Spark tables in batches, exactly once."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


if __name__ == "__main__":
    main()
