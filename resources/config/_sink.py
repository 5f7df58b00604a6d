"""Where events land: the sink's format, place and layout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import field_validator, model_validator
from typing_extensions import Self

from dagster_eventhub_ingest.resources.config._model import StrictModel, setting
from dagster_eventhub_ingest.resources.settings import EVENT_COLUMNS
from dagster_eventhub_ingest.resources.sink import (
    PARTITION_COLUMNS,
    SPARK_FORMATS,
    SinkSettings,
    SinkSources,
    partition_by_problem,
    sink_format_problem,
    sink_place_problem,
)

#: Columns of the rows every sink receives
#: (``dagster_eventhub_ingest.resources.eventhubs_source.eventhubs_schema``).
OUTPUT_COLUMNS: tuple[str, ...] = EVENT_COLUMNS


class SinkConfig(StrictModel):
    """Where events land: a Spark format (or ``deltalake``) and a path or a table."""

    format: str = setting(
        default="parquet",
        description=f"{', '.join(SPARK_FORMATS)} (Spark), a data source class name, or "
        "'deltalake' (Delta written by delta-rs, no Spark jars).",
    )
    path: str | None = setting(default=None, description="Output folder or URI (or give table).")
    table: str | None = setting(default=None, description="Spark catalog table (or give path).")
    partition_by: list[str] = setting(
        default_factory=list,
        description=f"Output columns to partition by, from: {', '.join(PARTITION_COLUMNS)}.",
    )
    shared: bool = setting(
        default=False,
        description="The local path is a volume every Spark node mounts at the same place "
        "(otherwise a local path is refused on a non-local Spark).",
    )
    storage_options: dict[str, str] = setting(
        default_factory=dict,
        description="format 'deltalake' on abfss:// / az://: delta-rs storage options (account, "
        "key or SAS from the environment, service principal, endpoint).",
        repr=False,
    )
    sources: SinkSources = setting(
        default="one",
        description="'one': the sink holds the events of one namespace, hub and consumer group "
        "(recorded at its first write) and refuses any other; 'many': several sources share it, "
        "each batch key and row (column eh_source) naming its source. Chosen when the sink is "
        "new.",
    )

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        problem = sink_format_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("storage_options", mode="before")
    @classmethod
    def _option_strings(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): str(v) for k, v in value.items()}
        return value

    @field_validator("partition_by", mode="before")
    @classmethod
    def _one_column(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("partition_by")
    @classmethod
    def _columns(cls, value: list[str]) -> list[str]:
        problem = partition_by_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _place(self) -> Self:
        problem = sink_place_problem(self.format, self.path, self.table, self.storage_options)
        if problem:
            raise ValueError(problem)
        return self

    def settings(self) -> SinkSettings:
        """The frozen, picklable sink settings."""
        return SinkSettings(
            format=self.format,
            path=self.path,
            table=self.table,
            partition_by=tuple(self.partition_by),
            shared=self.shared,
            storage_options=dict(self.storage_options),
            sources=self.sources,
        )


#: Master URLs Spark itself accepts (SparkContext's master parsing), checked at load so a typo
