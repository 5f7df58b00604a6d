"""Where events land: the sink's format, place and layout."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from resources.config._model import StrictModel, _show, _suggest
from resources.settings import EVENT_COLUMNS, SinkSettings

#: Sink format for Delta tables written by delta-rs (``deltalake``), without Spark jars.
DELTALAKE_FORMAT = "deltalake"
#: Spark formats that can hold the event schema (binary body, map columns). Other data sources
#: are named by their fully qualified class name (anything with a dot).
SPARK_FORMATS: tuple[str, ...] = ("parquet", "delta", "orc", "avro", "json", "iceberg", "hudi")
#: Columns of the rows every sink receives (``resources.spark_source.eventhubs_schema``).
OUTPUT_COLUMNS: tuple[str, ...] = EVENT_COLUMNS
#: The output columns a sink may be partitioned by (scalars; not the body or the maps).
PARTITION_COLUMNS: tuple[str, ...] = tuple(
    c for c in EVENT_COLUMNS if c not in ("body", "properties", "systemProperties")
)


class SinkConfig(StrictModel):
    """Where events land: a Spark format (or ``deltalake``) and a path or a table."""

    format: str = Field(
        default="parquet",
        description=f"{', '.join(SPARK_FORMATS)} (Spark), a data source class name, or "
        "'deltalake' (Delta written by delta-rs, no Spark jars).",
    )
    path: str | None = Field(default=None, description="Output folder or URI (or give table).")
    table: str | None = Field(default=None, description="Spark catalog table (or give path).")
    partition_by: list[str] = Field(
        default_factory=list,
        description=f"Output columns to partition by, from: {', '.join(PARTITION_COLUMNS)}.",
    )
    shared: bool = Field(
        default=False,
        description="The local path is a volume every Spark node mounts at the same place "
        "(otherwise a local path is refused on a non-local Spark).",
    )
    storage_options: dict[str, str] = Field(
        default_factory=dict,
        description="format 'deltalake' on abfss:// / az://: delta-rs storage options (account, "
        "key or SAS from the environment, service principal, endpoint).",
        repr=False,
    )

    @field_validator("format")
    @classmethod
    def _format(cls, value: str) -> str:
        valid = (*SPARK_FORMATS, DELTALAKE_FORMAT)
        if value in valid or ("." in value and value.strip(".") == value and " " not in value):
            return value
        raise ValueError(
            f"{_show(value)} is not a known format; {_suggest(value, valid)}valid: "
            f"{', '.join(valid)}, or a data source's fully qualified class name"
        )

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
        for column in value:
            if column not in PARTITION_COLUMNS:
                raise ValueError(
                    f"{column!r} is not a column of the output; "
                    f"{_suggest(column, PARTITION_COLUMNS)}valid: {', '.join(PARTITION_COLUMNS)}"
                )
        if len(set(value)) != len(value):
            raise ValueError(f"{value} names a column twice")
        return value

    @model_validator(mode="after")
    def _place(self) -> Self:
        if (self.path is None) == (self.table is None):
            raise ValueError(
                f"give exactly one of path or table (got path={self.path!r}, table={self.table!r})"
            )
        if self.format == DELTALAKE_FORMAT and self.path is None:
            raise ValueError(
                f"format {DELTALAKE_FORMAT!r} needs a path (a Delta table location), not "
                f"table={self.table!r}; or use format 'delta' with a Spark catalog that has Delta"
            )
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
        )


#: Master URLs Spark itself accepts (SparkContext's master parsing), checked at load so a typo
