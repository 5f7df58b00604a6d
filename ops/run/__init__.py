"""One ingestion run: the entry point, the loop, and the steps it takes.

- :mod:`.entry`: :func:`run_ingestion`, the one call the CLI, Dagster and Airflow make;
- :mod:`.settings`: what a run is given (:class:`IngestSettings`, :class:`ReplaySettings`);
- :mod:`.processor`: the loop (snapshot, claim cycles, release, report);
  :mod:`.cycle`: one claim cycle (intent, fence, read, write, checkpoint);
- :mod:`.plan`: pure planning (bounds, the next range, replays); :mod:`.lease`: leases kept
  alive while Spark reads; :mod:`.last_resort`: the sink as checkpoint of last resort;
  :mod:`.ahead`: checkpoints the hub cannot have produced (refused, or reset);
- :mod:`.ingestor`: the read+write step over Spark; :mod:`.warm_up`: its Spark path warmed;
- :mod:`.hub`: what the run asks Event Hubs; :mod:`.progress`: live progress and phase times;
- :mod:`.cancel`: stopping cleanly; :mod:`.fault`: named crash points for tests;
- :mod:`.report`: what a run reports (:class:`RunReport`, :class:`PartitionReport`);
  :mod:`.log`: its lines, to the logger and Dagster's ``context.log``.

The names load lazily: importing a step does not import the configuration model (pydantic).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagster_eventhub_ingest.resources.lazy import lazy_face

if TYPE_CHECKING:
    from dagster_eventhub_ingest.ops.run.cancel import Cancellation
    from dagster_eventhub_ingest.ops.run.entry import run_ingestion
    from dagster_eventhub_ingest.ops.run.ingestor import Ingestor, SparkIngestor
    from dagster_eventhub_ingest.ops.run.processor import Processor
    from dagster_eventhub_ingest.ops.run.report import PartitionReport, RunReport
    from dagster_eventhub_ingest.ops.run.settings import IngestSettings, ReplaySettings

_HOMES = {
    "Cancellation": ".cancel",
    "IngestSettings": ".settings",
    "Ingestor": ".ingestor",
    "PartitionReport": ".report",
    "Processor": ".processor",
    "ReplaySettings": ".settings",
    "RunReport": ".report",
    "SparkIngestor": ".ingestor",
    "run_ingestion": ".entry",
}

__all__ = [
    "Cancellation",
    "IngestSettings",
    "Ingestor",
    "PartitionReport",
    "Processor",
    "ReplaySettings",
    "RunReport",
    "SparkIngestor",
    "run_ingestion",
]


__getattr__, __dir__ = lazy_face(__name__, _HOMES)
