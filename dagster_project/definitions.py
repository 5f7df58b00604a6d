"""The project's Definitions: every component declared under ``dagster_project/defs/``.

``dagster dev`` (via ``workspace.yaml``), ``dagster asset materialize -m
dagster_eventhub_ingest.dagster_project.definitions`` and ``dg check defs`` all load this module.

Its runs execute their steps in the run worker's process (``dg.in_process_executor``): the
ingestion job has one step, and a step process of its own would import everything again
(docs/dagster.md, "Executor"). A job that names its own executor keeps it.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

__all__ = ["defs"]


@dg.definitions
def defs() -> dg.Definitions:
    """Every ``defs.yaml`` component under ``dagster_project/defs``, run in process."""
    return dg.Definitions.merge(
        dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parent),
        dg.Definitions(executor=dg.in_process_executor),
    )
