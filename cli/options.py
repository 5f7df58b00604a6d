"""Click options shared by the subcommands that read a config file (``run``, ``status``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

__all__ = ["config_option", "partition_option"]

config_option = click.option(
    "--config",
    "config_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="YAML config file (docs/example-config.yaml; `run` and `status` share it).",
)


def partition_option(help_text: str) -> Callable[[Any], Any]:
    """``--partition ID`` (repeatable) into the ``partitions`` tuple."""
    return click.option("--partition", "partitions", multiple=True, help=help_text)
