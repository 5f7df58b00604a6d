"""How Spark starts: a local master, a cluster, or a Spark Connect URL."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import field_validator, model_validator
from typing_extensions import Self

from dagster_eventhub_ingest.resources.config._model import StrictModel, _show, setting
from dagster_eventhub_ingest.resources.spark.kind import DEFAULT_SPARK_MASTER

#: fails before any claim instead of at session start.
_SPARK_MASTER = re.compile(
    r"local(\[(\*|\d+)(,\s*\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]"
    r"|spark://\S+|yarn|k8s://\S+|mesos://\S+"
)


class SparkConfig(StrictModel):
    """How Spark starts: the ``spark:`` block of the CLI file and of defs.yaml (Dagster builds
    its PySpark resource from it,
    ``dagster_eventhub_ingest.dagster_project.resources.spark_resource``)."""

    master: str | None = setting(
        default=None,
        description=f"Spark master: local[n] (default {DEFAULT_SPARK_MASTER}), spark://host:7077, "
        "yarn, k8s://...",
    )
    remote: str | None = setting(
        default=None,
        description="Spark Connect URL (sc://host:port) instead of master (exclusive).",
    )
    app_name: str = setting(default="ehingest", description="Spark application name.")
    conf: dict[str, str] = setting(
        default_factory=dict,
        description="Spark settings; numbers and booleans are written as Spark expects them.",
    )
    ship_code: bool = setting(
        default=True,
        description="Ship the project's code to non-local executors (false: the cluster has "
        "dagster-eventhub-ingest installed).",
    )

    @field_validator("conf", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        return spark_conf_strings(value)

    @field_validator("master")
    @classmethod
    def _master(cls, value: str | None) -> str | None:
        if value is not None and not _SPARK_MASTER.fullmatch(value):
            raise ValueError(
                f"{_show(value)} is not a Spark master; expected local, local[n], local[*], "
                "spark://host:7077, yarn, k8s://https://host:port or mesos://host:5050 (a Spark "
                "Connect URL goes in remote)"
            )
        return value

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("sc://"):
            raise ValueError(
                f"{_show(value)} is not a Spark Connect URL; expected 'sc://host:port' (e.g. "
                "'sc://localhost:15002')"
            )
        return value

    @model_validator(mode="after")
    def _one_engine(self) -> Self:
        if self.remote is not None and self.master is not None:
            raise ValueError(
                f"give master ({_show(self.master)}) or remote ({_show(self.remote)}), not both; "
                "remote is a Spark Connect URL (sc://host:port), master a cluster or local[n]"
            )
        return self

    @property
    def effective_master(self) -> str | None:
        """The master to start (None with Spark Connect)."""
        return None if self.remote else (self.master or DEFAULT_SPARK_MASTER)

    @property
    def is_local(self) -> bool:
        """True for a local master (the sink may then be any local path)."""
        from dagster_eventhub_ingest.resources.spark.kind import is_local_master

        return self.remote is None and is_local_master(self.effective_master)

    @property
    def engine(self) -> str:
        """How errors name this engine: ``master 'local[2]'`` or ``Spark Connect 'sc://...'``."""
        if self.remote:
            return f"Spark Connect {self.remote!r}"
        return f"master {self.effective_master!r}"

    def session_factory(self) -> Callable[[], Any]:
        """A function starting this SparkSession (a run calls it when it has something to read)."""

        def start() -> Any:
            from dagster_eventhub_ingest.resources.spark.code_shipping import SHIP_CODE_CONF
            from dagster_eventhub_ingest.resources.spark.session import spark_session

            conf = dict(self.conf)
            if not self.ship_code:
                conf[SHIP_CODE_CONF] = "false"
            return spark_session(
                self.app_name, master=self.effective_master, remote=self.remote, conf=conf
            )

        return start


def spark_conf_strings(value: Any) -> Any:
    """Spark settings as strings: ``4`` -> ``"4"``, ``true`` -> ``"true"`` (as Spark spells it)."""
    if not isinstance(value, Mapping):
        return value
    out: dict[str, str] = {}
    for key, item in value.items():
        if isinstance(item, bool):
            out[str(key)] = "true" if item else "false"
        elif isinstance(item, int | float | str):
            out[str(key)] = str(item)
        else:
            raise ValueError(
                f"{key}: {_show(item)} must be a string, number or boolean (a Spark setting)"
            )
    return out
