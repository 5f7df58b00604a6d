"""The ``--config`` YAML file of ``ehingest run`` / ``ehingest status``.

Secrets only come from the environment: a value may be (or contain) ``${ENV_VAR}``, which is
replaced by that variable; a literal secret (``AccountKey=``, ``SharedAccessKey=``,
``SharedAccessSignature=``, ``sig=``) written in the file is rejected, so config files can be
committed. Every error names the key, the (redacted) value and what is valid.

Example (docs/example-config.yaml has every key)::

    eventhub:
      connection_string: ${EVENTHUB_CONNECTION_STRING}
      eventhub_name: telemetry
      consumer_group: $Default
    store:
      connection_string: ${STORAGE_CONNECTION_STRING}
      container: ehingest-state
    sink:
      format: parquet
      path: /data/telemetry
      partition_by: [partition_id]
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

import yaml

from ops.run import IngestConfig
from resources.errors import ConfigurationError, redact
from resources.settings import EventHubSettings, SinkSettings, StoreSettings

__all__ = ["CliConfig", "load_config", "parse_config"]

_ENV_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Secret-bearing keys of Azure connection strings and SAS query strings (as resources.errors).
_SECRET_RE = re.compile(
    r"(?i)\b(SharedAccessKey|AccountKey|SharedAccessSignature|sig)=([^;&\s'\"]*)"
)

_EVENTHUB_KEYS = {
    "connection_string",
    "fully_qualified_namespace",
    "credential",
    "eventhub_name",
    "consumer_group",
}
_STORE_KEYS = {"connection_string", "account_url", "credential", "container", "create_container"}
_SINK_KEYS = {"format", "path", "table", "partition_by", "shared", "storage_options"}
_SPARK_KEYS = {"master", "remote", "app_name", "conf", "ship_code"}
_RUN_KEYS = {
    "strategy": str,
    "strategy_options": dict,
    "max_events_per_partition": int,
    "lease_expiry_seconds": float,
    "on_data_loss": str,
    "on_checkpoint_ahead": str,
    "receive_timeout_seconds": float,
    "prefetch": int,
    "max_readers_per_partition": int,
    "run_timeout_seconds": float,
    "join_grace_seconds": float,
    "report_lag_seconds": bool,
}
_TOP_KEYS = {"eventhub", "store", "sink", "spark", *_RUN_KEYS}
_CREDENTIALS = ("default_azure_credential",)


@dataclass(frozen=True)
class CliConfig:
    """A parsed config file: the run settings plus how to start Spark."""

    ingest: IngestConfig
    spark_master: str | None = "local[2]"
    spark_app_name: str = "ehingest"
    spark_conf: Mapping[str, str] = field(default_factory=dict)
    #: A Spark Connect URL (``sc://host:port``); exclusive with ``spark_master``.
    spark_remote: str | None = None
    #: Ship the project's code to non-local executors (False: the cluster has the package).
    spark_ship_code: bool = True

    def spark_factory(self) -> Callable[[], Any]:
        """A function starting the SparkSession this config asks for (when needed)."""

        def start() -> Any:
            from resources.code_shipping import SHIP_CODE_CONF
            from resources.spark_session import spark_session

            conf = dict(self.spark_conf)
            if not self.spark_ship_code:
                conf[SHIP_CODE_CONF] = "false"
            return spark_session(
                self.spark_app_name,
                master=None if self.spark_remote else self.spark_master,
                remote=self.spark_remote,
                conf=conf,
            )

        return start


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
        literal = _ENV_RE.sub("", node)
        match = _SECRET_RE.search(literal)
        if match and match.group(2):
            raise ConfigurationError(
                f"{key}: the config file holds a literal secret ({match.group(1)}=***). Secrets "
                f"come only from environment variables: set e.g. "
                f"{key.replace('.', '_').upper()}=... in the environment and write "
                f"'{key.rsplit('.', 1)[-1]}: ${{{key.replace('.', '_').upper()}}}' in the file."
            )


def _check_storage_options_from_env(raw: Mapping[str, Any]) -> None:
    from resources.sink_storage import SECRET_OPTION_KEYS

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
        if name in SECRET_OPTION_KEYS and not _ENV_RE.search(str(value)):
            env = f"SINK_{name.upper()}"
            raise ConfigurationError(
                f"sink.storage_options.{key}: a secret must come from the environment; set "
                f"{env}=... and write '{key}: ${{{env}}}' in the file"
            )


def _interpolate(node: Any, key: str, env: Mapping[str, str]) -> Any:
    if isinstance(node, Mapping):
        return {k: _interpolate(v, f"{key}.{k}" if key else str(k), env) for k, v in node.items()}
    if isinstance(node, list):
        return [_interpolate(v, f"{key}[{i}]", env) for i, v in enumerate(node)]
    if isinstance(node, str):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                raise ConfigurationError(
                    f"{key}: environment variable {name} (from '${{{name}}}') is not set; "
                    "export it before running"
                )
            return env[name]

        return _ENV_RE.sub(sub, node)
    return node


def _section(raw: Mapping[str, Any], name: str, valid: set[str], required: bool) -> dict:
    value = raw.get(name)
    if value is None:
        if required:
            raise ConfigurationError(
                f"{name}: missing section; it needs the keys {', '.join(sorted(valid))}"
            )
        return {}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{name}: must be a mapping of keys, got {_show(value)}")
    unknown = sorted(set(value) - valid)
    if unknown:
        raise ConfigurationError(
            f"{name}.{unknown[0]}: unknown key; valid keys in {name}: {', '.join(sorted(valid))}"
        )
    return dict(value)


def _credential(section: str, value: Any) -> str:
    if value not in _CREDENTIALS:
        raise ConfigurationError(
            f"{section}.credential: {_show(value)} is not valid; valid: "
            f"{', '.join(_CREDENTIALS)} (or give connection_string instead)"
        )
    return str(value)


def _typed(key: str, value: Any, kind: type) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigurationError(f"{key}: {_show(value)} must be true or false")
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{key}: {_show(value)} must be an integer")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigurationError(f"{key}: {_show(value)} must be a number (seconds)")
        return float(value)
    if kind is dict:
        if not isinstance(value, Mapping):
            raise ConfigurationError(f"{key}: {_show(value)} must be a mapping")
        return dict(value)
    if not isinstance(value, str):
        raise ConfigurationError(f"{key}: {_show(value)} must be a string")
    return value


def parse_config(raw: Any, env: Mapping[str, str] | None = None) -> CliConfig:
    """Validate a loaded YAML document and build the run settings from it."""
    if not isinstance(raw, Mapping):
        raise ConfigurationError(
            f"config: the file must hold a mapping with the sections eventhub, store, sink; got "
            f"{type(raw).__name__}"
        )
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise ConfigurationError(
            f"{unknown[0]}: unknown key; valid top-level keys: {', '.join(sorted(_TOP_KEYS))}"
        )
    _check_no_literal_secret(raw, "")
    _check_storage_options_from_env(raw)
    doc = _interpolate(raw, "", os.environ if env is None else env)

    eh = _section(doc, "eventhub", _EVENTHUB_KEYS, required=True)
    if "eventhub_name" not in eh:
        raise ConfigurationError("eventhub.eventhub_name: required (the Event Hub to read)")
    if eh.get("connection_string") and eh.get("credential"):
        raise ConfigurationError(
            "eventhub: give either connection_string or fully_qualified_namespace + credential, "
            "not both"
        )
    try:
        eventhub = EventHubSettings(
            eventhub_name=str(eh["eventhub_name"]),
            consumer_group=str(eh.get("consumer_group", "$Default")),
            connection_string=eh.get("connection_string"),
            fully_qualified_namespace=eh.get("fully_qualified_namespace"),
            credential_type=(
                _credential("eventhub", eh["credential"])  # type: ignore[arg-type]
                if eh.get("credential")
                else "connection_string"
            ),
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"eventhub.{exc}") from None

    st = _section(doc, "store", _STORE_KEYS, required=True)
    if "container" not in st:
        raise ConfigurationError("store.container: required (the Blob container for leases)")
    if st.get("connection_string") and st.get("credential"):
        raise ConfigurationError(
            "store: give either connection_string or account_url + credential, not both"
        )
    try:
        store = StoreSettings(
            container=str(st["container"]),
            connection_string=st.get("connection_string"),
            account_url=st.get("account_url"),
            credential_type=(
                _credential("store", st["credential"])  # type: ignore[arg-type]
                if st.get("credential")
                else "connection_string"
            ),
            create_container=_typed(
                "store.create_container", st.get("create_container", True), bool
            ),
        )
    except ConfigurationError as exc:
        text = str(exc).removeprefix("store.").removeprefix("store ")
        raise ConfigurationError(f"store.{text}") from None

    sk = _section(doc, "sink", _SINK_KEYS, required=True)
    partition_by = sk.get("partition_by", [])
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    if not isinstance(partition_by, list) or not all(isinstance(c, str) for c in partition_by):
        raise ConfigurationError(
            f"sink.partition_by: {_show(partition_by)} must be a list of column names"
        )
    try:
        sink = SinkSettings(
            format=str(sk.get("format", "parquet")),
            path=sk.get("path"),
            table=sk.get("table"),
            partition_by=tuple(partition_by),
            shared=_typed("sink.shared", sk.get("shared", False), bool),
            storage_options={
                str(k): str(v)
                for k, v in _typed(
                    "sink.storage_options", sk.get("storage_options", {}), dict
                ).items()
            },
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"sink.{exc}".replace("sink.sink", "sink")) from None

    run_kwargs = {k: _typed(k, doc[k], kind) for k, kind in _RUN_KEYS.items() if k in doc}
    if "strategy" in run_kwargs:
        from ops.balancing import STRATEGIES

        if run_kwargs["strategy"] not in STRATEGIES:
            raise ConfigurationError(
                f"strategy: {_show(run_kwargs['strategy'])} is not valid; valid: "
                f"{', '.join(STRATEGIES)}"
            )
    ingest = IngestConfig(eventhub=eventhub, store=store, sink=sink, **run_kwargs)

    sp = _section(doc, "spark", _SPARK_KEYS, required=False)
    conf = _typed("spark.conf", sp.get("conf", {}), dict)
    remote = _typed("spark.remote", sp["remote"], str) if "remote" in sp else None
    if remote is not None and "master" in sp:
        raise ConfigurationError(
            f"spark: give master ({_show(sp['master'])}) or remote ({_show(remote)}), not both; "
            "remote is a Spark Connect URL (sc://host:port), master a cluster or local[n]"
        )
    if remote is not None and not remote.startswith("sc://"):
        raise ConfigurationError(
            f"spark.remote: {_show(remote)} is not a Spark Connect URL; expected "
            "'sc://host:port' (e.g. 'sc://localhost:15002')"
        )
    master = _typed("spark.master", sp.get("master", "local[2]"), str)
    from ops.write import check_sink_reachable
    from resources.spark_session import is_local_master

    # Before anything is claimed or a JVM starts: a local sink path a cluster cannot share.
    try:
        check_sink_reachable(
            sink,
            local=remote is None and is_local_master(master),
            engine=f"Spark Connect {remote!r}" if remote else f"master {master!r}",
        )
    except ConfigurationError as exc:
        raise ConfigurationError(f"sink.path: {exc}") from None
    return CliConfig(
        ingest=ingest,
        spark_master=None if remote else master,
        spark_app_name=_typed("spark.app_name", sp.get("app_name", "ehingest"), str),
        spark_conf={str(k): str(v) for k, v in conf.items()},
        spark_remote=remote,
        spark_ship_code=_typed("spark.ship_code", sp.get("ship_code", True), bool),
    )


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> CliConfig:
    """Read and validate the YAML config file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"--config: cannot read {str(p)!r}: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"--config {str(p)!r}: not valid YAML: {redact(str(exc))}"
        ) from None
    return parse_config(raw, env)
