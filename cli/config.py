"""The ``--config`` YAML file of ``ehingest run`` / ``ehingest status``.

The file is :class:`dagster_eventhub_ingest.resources.config.PipelineConfig` (the same keys as a
Component's defs.yaml) plus a ``spark`` section; it is validated completely before any Azure call.
Secrets come only from the environment: credentials name their environment variable
(``connection_string_env``), and any other value may contain ``${ENV_VAR}`` (read by
:func:`dagster_eventhub_ingest.resources.config.expand_env`: an unset variable, or one empty
inside a longer value, is an error). The YAML is read by
:func:`~dagster_eventhub_ingest.resources.config.load_yaml`, which refuses alias bombs. A
literal secret (``AccountKey=``, ``SharedAccessKey=``, ``SharedAccessSignature=``, ``sig=``)
written in the file is rejected, so config files can be committed. Every error names the key,
the (redacted) value and what is valid.

Example (docs/example-config.yaml has every key)::

    eventhub:
      eventhub_name: telemetry
      consumer_group: $Default
      credential: {connection_string_env: EVENTHUB_CONNECTION_STRING}
    store:
      container: ehingest-state
      credential: {connection_string_env: STORAGE_CONNECTION_STRING}
    sink:
      format: parquet
      path: /data/telemetry
      partition_by: [partition]
    strategy: balanced
    max_events_per_partition: 100000
    lease_expiry_seconds: 60
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from dagster_eventhub_ingest.ops.run.settings import IngestSettings
from dagster_eventhub_ingest.resources.config import (
    ENV_REFERENCE,
    PipelineConfig,
    SparkConfig,
    expand_env,
    load_yaml,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, redact

__all__ = ["CliConfig", "CliSettings", "load_config", "parse_config"]

# Secret-bearing keys of Azure connection strings and SAS query strings (as
# dagster_eventhub_ingest.resources.errors).
_SECRET_RE = re.compile(
    r"(?i)\b(SharedAccessKey|AccountKey|SharedAccessSignature|sig)=([^;&\s'\"]*)"
)


class CliConfig(PipelineConfig):
    """The config file: the pipeline's :class:`PipelineConfig` plus how the CLI starts Spark."""

    spark: SparkConfig = Field(default_factory=SparkConfig, description="How to start Spark.")


@dataclass(frozen=True)
class CliSettings:
    """A parsed config file: the run settings plus how to start Spark."""

    ingest: IngestSettings
    spark: SparkConfig = field(default_factory=SparkConfig)

    def spark_factory(self) -> Callable[[], Any]:
        """A function starting the SparkSession this config asks for (when needed)."""
        return self.spark.session_factory()


def _show(value: Any) -> str:
    return redact(repr(value))


def _check_no_literal_secret(node: Any, key: str) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            _check_no_literal_secret(v, f"{key}.{k}" if key else str(k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _check_no_literal_secret(v, f"{key}[{i}]")
    elif isinstance(node, str):
        literal = ENV_REFERENCE.sub("", node)
        match = _SECRET_RE.search(literal)
        if match and match.group(2):
            raise ConfigurationError(
                f"{key}: the config file holds a literal secret (the {match.group(1)} value). "
                "Secrets "
                f"come only from environment variables: set e.g. "
                f"{key.replace('.', '_').upper()}=... in the environment and write "
                f"'{key.rsplit('.', 1)[-1]}: ${{{key.replace('.', '_').upper()}}}' in the file."
            )


def _check_storage_options_from_env(raw: Mapping[str, Any]) -> None:
    from dagster_eventhub_ingest.ops.sinks.storage import SECRET_OPTION_KEYS

    sink = raw.get("sink")
    options = sink.get("storage_options") if isinstance(sink, Mapping) else None
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"sink.storage_options: must be a mapping of option names to strings, got "
            f"{_show(options)}"
        )
    for key, value in options.items():
        name = str(key).lower().removeprefix("azure_storage_").removeprefix("azure_")
        if name in SECRET_OPTION_KEYS and not ENV_REFERENCE.search(str(value)):
            env = f"SINK_{name.upper()}"
            raise ConfigurationError(
                f"sink.storage_options.{key}: a secret must come from the environment; set "
                f"{env}=... and write '{key}: ${{{env}}}' in the file"
            )


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> CliSettings:
    """Validate a loaded YAML document and build the run settings from it."""
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"config: the file must hold a mapping with the sections eventhub, store, sink; got "
            f"{type(raw).__name__}"
        )
    _check_no_literal_secret(raw, "")
    _check_storage_options_from_env(raw)
    env_map = os.environ if env is None else env
    config = CliConfig.from_dict(expand_env(dict(raw), "", env_map))
    ingest = IngestSettings.from_config(config, env_map)
    spark = config.spark
    from dagster_eventhub_ingest.ops.sinks.checks import check_sink_reachable

    # Before anything is claimed or a JVM starts: a local sink path a cluster cannot share.
    try:
        check_sink_reachable(ingest.sink, local=spark.is_local, engine=spark.engine)
    except ConfigurationError as exc:
        raise ConfigurationError(f"sink.path: {exc}") from None
    return CliSettings(ingest=ingest, spark=spark)


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> CliSettings:
    """Read and validate the YAML config file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--config: cannot read {str(p)!r}: {exc.strerror}") from None
    return parse_config(load_yaml(text, where=f"--config {str(p)!r}"), env)
