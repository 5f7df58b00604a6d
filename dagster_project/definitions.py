"""The project's Definitions: every component declared under ``dagster_project/defs/``.

``dagster dev`` (via ``workspace.yaml``), ``dagster asset materialize -m
dagster_eventhub_ingest.dagster_project.definitions`` and ``dg check defs`` all load this module.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

__all__ = ["defs"]


@dg.definitions
def defs() -> dg.Definitions:
    """Load every ``defs.yaml`` component under ``dagster_project/defs``."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parent)
