"""The one configuration model: every setting declared once, with its default, limits and help.

Every surface reads these classes: the ``ehingest`` YAML (``cli/config.py``), the Dagster
Component's ``defs.yaml`` and resources (``dagster_project/``), the asset's run config, and the
run itself (:class:`ops.run.IngestConfig` extends :class:`RunOptions`). Everything that can be
checked without the network is checked here, at load: names of strategies and formats, the sink's
``partition_by`` columns against the output schema, reader limits, numbers. Unknown keys are
rejected with a did-you-mean.

Build from a plain dict (YAML, an Airflow connection, a test)::

    spec = IngestSpec.from_dict({
        "eventhub": {"eventhub_name": "telemetry"},        # connection string from
        "store": {"container": "ehingest-state"},          # EVENTHUB_CONNECTION_STRING and
        "sink": {"path": "/data/telemetry"},               # AZURE_STORAGE_CONNECTION_STRING
        "strategy": "balanced",
    })
    config = IngestConfig.from_spec(spec)                 # ops.run.IngestConfig

Credentials have one shape everywhere: a connection string named by an environment variable, or
``DefaultAzureCredential`` with its options::

    eventhub:
      eventhub_name: telemetry
      credential: {connection_string_env: EVENTHUB_CONNECTION_STRING}
    store:
      container: ehingest-state
      credential:
        credential_type: default_azure_credential
        account_url: https://myaccount.blob.core.windows.net
        managed_identity_client_id: 00000000-0000-0000-0000-000000000000

Errors raised by :meth:`StrictModel.from_dict` are :class:`~resources.errors.ConfigurationError`
whose message names the key path, the (redacted) value and what is valid.
"""

from __future__ import annotations

import difflib
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Literal, Self, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from resources.errors import ConfigurationError, redact
from resources.limits import MAX_PREFETCH, MAX_READERS_PER_PARTITION, ON_DATA_LOSS, OnDataLoss
from resources.settings import (
    EVENT_COLUMNS,
    EventHubSettings,
    SinkSettings,
    StoreSettings,
    check_container_name,
)

__all__ = [
    "DELTALAKE_FORMAT",
    "MAX_PREFETCH",
    "MAX_READERS_PER_PARTITION",
    "ON_CHECKPOINT_AHEAD",
    "ON_DATA_LOSS",
    "OUTPUT_COLUMNS",
    "PARTITION_COLUMNS",
    "SPARK_FORMATS",
    "STRATEGY_NAMES",
    "AssetOptions",
    "AssetPolicies",
    "ConfigDeprecationWarning",
    "EventHubConfig",
    "EventHubConnectionStringCredential",
    "EventHubIdentityCredential",
    "IdentityOptions",
    "IngestSpec",
    "LagCheckOptions",
    "LagSeverity",
    "OnCheckpointAhead",
    "OnDataLoss",
    "OneLineErrors",
    "RunOptions",
    "ScheduleOptions",
    "SinkConfig",
    "SparkConfig",
    "StoreConfig",
    "StoreConnectionStringCredential",
    "StoreIdentityCredential",
    "StrictModel",
    "format_validation_error",
    "spark_conf_strings",
    "unknown_key_message",
]

StrategyName = Literal["greedy", "balanced", "eph", "equal", "jump_hash", "delay_race"]
#: Balancing strategies (``ops.balancing.STRATEGIES`` has the implementations; a test keeps
#: the two in step).
STRATEGY_NAMES: tuple[str, ...] = get_args(StrategyName)
OnCheckpointAhead = Literal["fail", "reset_to_earliest"]
ON_CHECKPOINT_AHEAD: tuple[str, ...] = get_args(OnCheckpointAhead)

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


class ConfigDeprecationWarning(FutureWarning):
    """A configuration key that still works but will be removed in the next release.

    A ``FutureWarning`` so that it is shown by default to whoever runs the CLI or Dagster.
    """


def _suggest(word: str, valid: tuple[str, ...] | list[str]) -> str:
    match = difflib.get_close_matches(word, list(valid), n=1, cutoff=0.6)
    return f"did you mean {match[0]!r}? " if match else ""


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(repr(v) for v in values)


def _show(value: Any) -> str:
    return redact(repr(value))


def _loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("connection_string", "default_azure_credential") and out.endswith(
            "credential"
        ):
            continue  # the union's tag: the path reads better without it
        elif "function-" in str(part) or "[" in str(part):
            continue  # pydantic's internal validator names
        else:
            out += f".{part}" if out else str(part)
    return out


def format_validation_error(exc: ValidationError, prefix: str = "") -> str:
    """One line per error: ``key.path: what is wrong; what is valid`` (values redacted)."""
    lines: list[str] = []
    for err in exc.errors():
        path = ".".join(p for p in (prefix, _loc(tuple(err["loc"]))) if p)
        kind = err["type"]
        value = err.get("input")
        msg = err["msg"]
        if kind == "value_error":
            text = msg.removeprefix("Value error, ")
            # A model-level check names its key first ("key: ..."): put it on the path.
            head, sep, rest = text.partition(": ")
            if sep and path and head.isidentifier():
                same = path == head or path.endswith("." + head)
                lines.append(f"{path}: {rest}" if same else f"{path}.{head}: {rest}")
                continue
        elif kind == "missing":
            text = "required"
        elif kind == "literal_error":
            expected = [a.strip().strip("'") for a in err["ctx"]["expected"].split(" or ")]
            expected = [e for part in expected for e in part.split(", ")]
            expected = [e.strip("'") for e in expected]
            hint = _suggest(str(value), expected) if isinstance(value, str) else ""
            text = f"{_show(value)} is not valid; {hint}valid: {', '.join(expected)}"
        elif kind in ("int_type", "int_parsing", "int_from_float"):
            text = f"{_show(value)} must be an integer"
        elif kind in ("float_type", "float_parsing"):
            text = f"{_show(value)} must be a number"
        elif kind in ("bool_type", "bool_parsing"):
            text = f"{_show(value)} must be true or false"
        elif kind == "string_type":
            text = f"{_show(value)} must be a string"
        elif kind in ("dict_type", "model_type", "model_attributes_type", "mapping_type"):
            text = f"must be a mapping of keys, got {_show(value)}"
        elif kind in ("list_type", "tuple_type"):
            text = f"{_show(value)} must be a list"
        elif kind == "extra_forbidden":
            text = "unknown key"
        elif kind == "union_tag_invalid":
            text = (
                f"credential_type {_show(err['ctx'].get('tag'))} is not valid; valid: "
                "connection_string, default_azure_credential"
            )
        else:
            text = redact(msg)
        lines.append(f"{path}: {text}" if path else text)
    return "; ".join(lines)


def unknown_key_message(key: str, valid: list[str]) -> str:
    """``key: unknown key; did you mean 'x'? valid keys: ...`` (one wording everywhere)."""
    return f"{key}: unknown key; {_suggest(key, valid)}valid keys: {', '.join(valid)}"


def _field_names(cls: type[BaseModel]) -> list[str]:
    names: list[str] = []
    for name, info in cls.model_fields.items():
        names.append(info.alias or name)
    return names


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown keys rejected with a did-you-mean.

    Numbers and booleans are checked strictly (``"5"`` is not an integer, ``1`` is not true):
    a quoted number in YAML is a mistake worth reporting, not guessing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    #: Old key -> new key; accepted with a :class:`ConfigDeprecationWarning` for one release.
    renamed_keys: ClassVar[dict[str, str]] = {}

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Rewrite deprecated spellings (warning once per key); the default changes nothing."""
        return data

    @model_validator(mode="before")
    @classmethod
    def _check_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = cls.upgrade(dict(data))
        for old, new in cls.renamed_keys.items():
            if old in data:
                if new in data:
                    raise ValueError(f"give {new} only ({old} is its old name)")
                warnings.warn(
                    f"{old} is deprecated; write {new} (the old key stops working in the next "
                    "release)",
                    ConfigDeprecationWarning,
                    stacklevel=2,
                )
                data[new] = data.pop(old)
        valid = _field_names(cls)
        for key in data:
            if key not in valid:
                raise ValueError(
                    f"{key}: unknown key; {_suggest(str(key), valid)}valid keys: {', '.join(valid)}"
                )
        for name, info in cls.model_fields.items():
            if name not in data or data[name] is None:
                continue
            value = data[name]
            kinds = {a for a in (info.annotation, *get_args(info.annotation)) if a is not None}
            if bool in kinds and not isinstance(value, bool):
                raise ValueError(f"{name}: {_show(value)} must be true or false")
            if kinds & {int, float} and not kinds & {str, bool}:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    what = "an integer" if float not in kinds else "a number"
                    raise ValueError(f"{name}: {_show(value)} must be {what}")
                if float not in kinds and not isinstance(value, int):
                    raise ValueError(f"{name}: {_show(value)} must be an integer")
        return data

    @classmethod
    def from_dict(cls, data: Any, *, where: str = "") -> Self:
        """Validate ``data`` (a plain mapping, e.g. loaded YAML); raise ConfigurationError."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(format_validation_error(exc, where)) from None


class OneLineErrors(BaseModel):
    """For a model built by hand (a resource, the run's config): a bad value raises
    :class:`~resources.errors.ConfigurationError` in one line, not pydantic's dump.

    Not for a model nested in another: pydantic calls a custom ``__init__`` when it validates a
    nested model, and the error would lose its key path.
    """

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ConfigurationError(format_validation_error(exc)) from None


def _at_least(value: Any, low: float, hint: str = "", *, integer: bool = False) -> Any:
    if value is not None and value < low:
        what = "an integer " if integer else ""
        raise ValueError(f"{value:g} must be {what}>= {low:g}{hint}")
    return value


def _above(value: Any, low: float, hint: str = "") -> Any:
    if value is not None and not value > low:
        raise ValueError(f"{value:g} must be > {low:g}{hint}")
    return value


# --------------------------------------------------------------------------------------------
# Credentials: one shape for the Event Hub and the store, in YAML, resources and the CLI
# --------------------------------------------------------------------------------------------


class IdentityOptions(StrictModel):
    """Options of azure-identity's ``DefaultAzureCredential`` (Entra ID, no secret in config)."""

    managed_identity_client_id: str | None = Field(
        default=None,
        description="Client id of a user-assigned managed identity (unset: system-assigned).",
    )
    tenant_id: str | None = Field(
        default=None,
        description="Entra tenant for the credentials that take one (workload identity, "
        "Visual Studio Code, shared cache, interactive browser).",
    )
    exclude_environment_credential: bool = Field(default=False, description="Skip AZURE_* env.")
    exclude_workload_identity_credential: bool = Field(
        default=False, description="Skip workload identity (Kubernetes)."
    )
    exclude_managed_identity_credential: bool = Field(
        default=False, description="Skip managed identity."
    )
    exclude_shared_token_cache_credential: bool = Field(
        default=False, description="Skip the shared token cache."
    )
    exclude_cli_credential: bool = Field(default=False, description="Skip the Azure CLI login.")
    exclude_developer_cli_credential: bool = Field(
        default=False, description="Skip the Azure Developer CLI login."
    )
    exclude_powershell_credential: bool = Field(default=False, description="Skip Azure PowerShell.")
    exclude_visual_studio_code_credential: bool = Field(
        default=False, description="Skip Visual Studio Code."
    )
    exclude_broker_credential: bool = Field(
        default=False, description="Skip the broker (WAM) login."
    )
    exclude_interactive_browser_credential: bool = Field(
        default=True, description="Skip the interactive browser login (skipped by default)."
    )

    def credential_options(self) -> tuple[tuple[str, Any], ...]:
        """The options as plain, picklable pairs (what the settings carry to executors)."""
        out: list[tuple[str, Any]] = []
        for name in IdentityOptions.model_fields:
            value = getattr(self, name)
            if value != IdentityOptions.model_fields[name].default:
                out.append((name, value))
        return tuple(out)


class EventHubConnectionStringCredential(StrictModel):
    """An Event Hubs connection string, read from an environment variable (never from a file)."""

    credential_type: Literal["connection_string"] = Field(
        default="connection_string", description="Selects connection-string authentication."
    )
    connection_string_env: str = Field(
        default="EVENTHUB_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string "
        "('Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...[;EntityPath=hub]').",
    )


class EventHubIdentityCredential(IdentityOptions):
    """DefaultAzureCredential for a namespace (managed identity, workload identity, CLI)."""

    credential_type: Literal["default_azure_credential"] = Field(
        default="default_azure_credential", description="Selects DefaultAzureCredential."
    )
    fully_qualified_namespace: str = Field(
        description="The namespace host, e.g. 'myns.servicebus.windows.net'."
    )


class StoreConnectionStringCredential(StrictModel):
    """A Blob Storage connection string, read from an environment variable."""

    credential_type: Literal["connection_string"] = Field(
        default="connection_string", description="Selects connection-string authentication."
    )
    connection_string_env: str = Field(
        default="AZURE_STORAGE_CONNECTION_STRING",
        description="Name of the environment variable holding the connection string.",
    )


class StoreIdentityCredential(IdentityOptions):
    """DefaultAzureCredential for a storage account."""

    credential_type: Literal["default_azure_credential"] = Field(
        default="default_azure_credential", description="Selects DefaultAzureCredential."
    )
    account_url: str = Field(
        description="The Blob service URL, e.g. 'https://myaccount.blob.core.windows.net'."
    )


def _pick_credential(
    value: Any, by_string: type[StrictModel], by_identity: type[StrictModel]
) -> Any:
    """Validate a credential mapping as the class its ``credential_type`` names.

    ``credential_type`` defaults to ``connection_string``. (A pydantic discriminator would do
    this, but Dagster's component schema cannot carry one.)
    """
    if not isinstance(value, Mapping):
        return value
    kind = value.get("credential_type", "connection_string")
    classes = {"connection_string": by_string, "default_azure_credential": by_identity}
    if kind not in classes:
        raise ValueError(
            f"credential_type {_show(kind)} is not valid; {_suggest(str(kind), list(classes))}"
            "valid: connection_string, default_azure_credential"
        )
    try:
        return classes[kind].model_validate(value)
    except ValidationError as exc:
        raise ValueError(format_validation_error(exc)) from None


def _env_value(env_name: str, where: str, env: Mapping[str, str]) -> str:
    value = env.get(env_name)
    if not value:
        raise ConfigurationError(
            f"{where}.credential.connection_string_env: environment variable {env_name} is not "
            "set (or empty); export the connection string in it before running"
        )
    return value


# --------------------------------------------------------------------------------------------
# The three places: Event Hub, store, sink
# --------------------------------------------------------------------------------------------


class EventHubConfig(StrictModel):
    """The Event Hub to read, the consumer group, and how to authenticate."""

    eventhub_name: str | None = Field(
        default=None,
        description="Name of the Event Hub; may be omitted when the connection string has "
        "EntityPath.",
    )
    consumer_group: str = Field(
        default="$Default",
        description="Consumer group to read as; checkpoints are kept per consumer group.",
    )
    credential: EventHubConnectionStringCredential | EventHubIdentityCredential = Field(
        default_factory=EventHubConnectionStringCredential,
        description="A connection string from an environment variable (default "
        "EVENTHUB_CONNECTION_STRING), or DefaultAzureCredential with its options.",
    )

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Accept the old credential keys beside the section's keys (one release)."""
        return _move_legacy_credential(data, "eventhub", "fully_qualified_namespace")

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return _pick_credential(
            value, EventHubConnectionStringCredential, EventHubIdentityCredential
        )

    @field_validator("eventhub_name", "consumer_group")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> EventHubSettings:
        """The frozen, picklable settings (reads the connection string's env var now)."""
        cred = self.credential
        if isinstance(cred, EventHubIdentityCredential):
            if not self.eventhub_name:
                raise ConfigurationError("eventhub.eventhub_name: required (the Event Hub to read)")
            return EventHubSettings(
                eventhub_name=self.eventhub_name,
                consumer_group=self.consumer_group,
                fully_qualified_namespace=cred.fully_qualified_namespace,
                credential_type="default_azure_credential",
                credential_options=cred.credential_options(),
            )
        conn = connection_string or _env_value(
            cred.connection_string_env, "eventhub", os.environ if env is None else env
        )
        try:
            return EventHubSettings(
                eventhub_name=self.eventhub_name or "",
                consumer_group=self.consumer_group,
                connection_string=conn,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(f"eventhub.{exc}") from None


class StoreConfig(StrictModel):
    """The Blob container for leases and checkpoints, and how to authenticate."""

    container: str = Field(description="Blob container name, e.g. 'ehingest-state'.")
    create_container: bool = Field(
        default=True, description="Create the container if missing (False: fail clearly)."
    )
    credential: StoreConnectionStringCredential | StoreIdentityCredential = Field(
        default_factory=StoreConnectionStringCredential,
        description="A connection string from an environment variable (default "
        "AZURE_STORAGE_CONNECTION_STRING), or DefaultAzureCredential with its options.",
    )

    @classmethod
    def upgrade(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Accept the old credential keys beside the section's keys (one release)."""
        return _move_legacy_credential(data, "store", "account_url")

    @field_validator("credential", mode="before")
    @classmethod
    def _tag(cls, value: Any) -> Any:
        return _pick_credential(value, StoreConnectionStringCredential, StoreIdentityCredential)

    @field_validator("container")
    @classmethod
    def _container(cls, value: str) -> str:
        check_container_name(value)
        return value

    def settings(
        self, env: Mapping[str, str] | None = None, *, connection_string: str | None = None
    ) -> StoreSettings:
        """The frozen, picklable settings (reads the connection string's env var now)."""
        cred = self.credential
        if isinstance(cred, StoreIdentityCredential):
            return StoreSettings(
                container=self.container,
                account_url=cred.account_url,
                credential_type="default_azure_credential",
                credential_options=cred.credential_options(),
                create_container=self.create_container,
            )
        conn = connection_string or _env_value(
            cred.connection_string_env, "store", os.environ if env is None else env
        )
        try:
            return StoreSettings(
                container=self.container,
                connection_string=conn,
                create_container=self.create_container,
            )
        except ConfigurationError as exc:
            text = str(exc).removeprefix("store.").removeprefix("store ")
            raise ConfigurationError(f"store.{text}") from None


def _move_legacy_credential(data: dict[str, Any], section: str, where_key: str) -> dict[str, Any]:
    """Accept the old keys (``credential_type``/``connection_string_env``/... beside the
    section's other keys, and the CLI's ``credential: default_azure_credential``)."""
    legacy_keys = ("credential_type", "connection_string_env", where_key)
    for key in legacy_keys:
        if key in data and data[key] is None:
            del data[key]  # an unset legacy field (the Component declares them)
    legacy = [k for k in legacy_keys if k in data]
    old_cli = isinstance(data.get("credential"), str)
    if not legacy and not old_cli:
        return data
    data = dict(data)
    cred: dict[str, Any] = {"credential_type": None}
    if old_cli:
        cred["credential_type"] = data.pop("credential")
    elif isinstance(data.get("credential"), Mapping):
        raise ValueError(
            f"give the credential in one place: move {', '.join(legacy)} into {section}.credential"
        )
    for key in legacy:
        cred[key] = data.pop(key)
    if cred["credential_type"] is None:
        identity = where_key in cred
        cred["credential_type"] = "default_azure_credential" if identity else "connection_string"
    if cred["credential_type"] == "connection_string":
        cred.pop(where_key, None)
    else:
        cred.pop("connection_string_env", None)
    old_keys = ["credential", *legacy] if old_cli else legacy
    shown = ", ".join(f"{k}: {v}" for k, v in cred.items())
    warnings.warn(
        f"{section}: the old credential keys ({', '.join(old_keys)}) are deprecated; write "
        f"{section}.credential: {{{shown}}} (the old keys stop working in the next release)",
        ConfigDeprecationWarning,
        stacklevel=2,
    )
    data["credential"] = cred
    return data


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
#: fails before any claim instead of at session start.
_SPARK_MASTER = re.compile(
    r"local(\[(\*|\d+)(,\s*\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]"
    r"|spark://\S+|yarn|k8s://\S+|mesos://\S+"
)

#: The CLI's Spark master when neither ``master`` nor ``remote`` is given.
DEFAULT_SPARK_MASTER = "local[2]"


class SparkConfig(StrictModel):
    """How Spark starts: the ``spark:`` block of the CLI file and of defs.yaml (Dagster builds
    its PySpark resource from it, ``dagster_project.resources.spark_resource``)."""

    master: str | None = Field(
        default=None,
        description=f"Spark master: local[n] (default {DEFAULT_SPARK_MASTER}), spark://host:7077, "
        "yarn, k8s://...",
    )
    remote: str | None = Field(
        default=None,
        description="Spark Connect URL (sc://host:port) instead of master (exclusive).",
    )
    app_name: str = Field(default="ehingest", description="Spark application name.")
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings; numbers and booleans are written as Spark expects them.",
    )
    ship_code: bool = Field(
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
        from resources.spark_kind import is_local_master

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
            from resources.code_shipping import SHIP_CODE_CONF
            from resources.spark_session import spark_session

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


# --------------------------------------------------------------------------------------------
# How Dagster declares the pipeline: the asset, its schedule, its lag check
# --------------------------------------------------------------------------------------------

LagSeverity = Literal["WARN", "ERROR"]


class AssetPolicies(StrictModel):
    """How Dagster runs and judges the asset: its concurrency pool and freshness policy."""

    pool: str | None = Field(
        default="eventhub_ingest",
        description="Dagster concurrency pool of the ingestion step; set its limit on the "
        "instance to at least schedule.runs.",
    )
    freshness_fail_minutes: float | None = Field(
        default=None,
        description="Freshness policy: fail when no batch landed for this long (default: three "
        "schedule periods when a schedule is set).",
    )

    @field_validator("freshness_fail_minutes")
    @classmethod
    def _freshness(cls, value: float | None) -> float | None:
        return _above(value, 0, " (or unset)")


class AssetOptions(AssetPolicies):
    """How the Dagster asset is declared (defs.yaml's top-level keys beside the run options)."""

    asset_key: str = Field(default="eventhub_events", description="Asset key ('a/b' for a path).")
    group_name: str | None = Field(default=None, description="Asset group in the UI.")
    description: str | None = Field(default=None, description="Asset description in the UI.")
    partition_sync_interval_seconds: int = Field(
        default=300, description="How often the sensor asks the hub for new partitions (>= 1)."
    )
    backfill_max_partitions_per_run: int | None = Field(
        default=None,
        description="UI backfills: unset = one run per contiguous range; N = runs of <= N keys.",
    )

    @field_validator("partition_sync_interval_seconds", "backfill_max_partitions_per_run")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        return _at_least(value, 1, integer=True)


class ScheduleOptions(StrictModel):
    """Every N minutes (or on a cron string), K runs over every partition."""

    every_minutes: int = Field(
        default=5, description="Period in minutes; divides an hour or a day (1, 5, 15, 60, ...)."
    )
    runs: int = Field(default=1, description="K: parallel runs per tick (>= 1); they share work.")
    cron_schedule: str | None = Field(default=None, description="Cron string (overrides N).")
    running: bool = Field(default=False, description="Start the schedule switched on.")

    @field_validator("every_minutes")
    @classmethod
    def _period(cls, value: int) -> int:
        if _every_minutes_cron(value) is None:
            raise ValueError(
                f"{value} does not divide an hour or a day evenly; use one of 1, 2, 3, 4, 5, 6, "
                "10, 12, 15, 20, 30, 60, 120, 180, ... or give a cron string"
            )
        return value

    @field_validator("runs")
    @classmethod
    def _runs(cls, value: int) -> int:
        return _at_least(value, 1, " (parallel runs per tick)", integer=True)

    @property
    def cron(self) -> str:
        """The cron string of the schedule: ``cron_schedule``, or every ``every_minutes``."""
        return self.cron_schedule or str(_every_minutes_cron(self.every_minutes))


def _every_minutes_cron(minutes: int) -> str | None:
    """A cron string for "every ``minutes`` minutes" (None unless it divides an hour or a day)."""
    if 1 <= minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if minutes >= 60 and minutes % 60 == 0 and 24 % (minutes // 60) == 0:
        hours = minutes // 60
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    return None


class LagCheckOptions(StrictModel):
    """The lag check: thresholds (set at least one for a check), severity, and its sensor."""

    max_lag_events: int | None = Field(
        default=None, description="Max events behind the hub (>= 0)."
    )
    max_lag_seconds: float | None = Field(
        default=None, description="Max age of the oldest unread event, seconds (>= 0)."
    )
    severity: LagSeverity = Field(default="WARN", description="Severity on failure.")
    every_minutes: float = Field(
        default=5,
        description="A sensor also evaluates the check this often, from the hub and the "
        "checkpoints without a run, so lag is reported while no ingestion runs (> 0).",
    )
    running: bool = Field(default=True, description="Start the check's sensor switched on.")

    @field_validator("max_lag_events", "max_lag_seconds")
    @classmethod
    def _threshold(cls, value: float | None) -> float | None:
        return _at_least(value, 0, " (or unset for no threshold)")

    @field_validator("every_minutes")
    @classmethod
    def _every(cls, value: float) -> float:
        return _above(value, 0)

    @property
    def has_thresholds(self) -> bool:
        """True when a threshold is set (otherwise there is no check)."""
        return self.max_lag_events is not None or self.max_lag_seconds is not None


# --------------------------------------------------------------------------------------------
# How runs ingest
# --------------------------------------------------------------------------------------------


class RunOptions(StrictModel):
    """How one run claims, reads and waits; the same keys in defs.yaml, the CLI and run config."""

    strategy: StrategyName = Field(
        default="balanced",
        description=f"Balancing strategy: {', '.join(STRATEGY_NAMES)} (docs/balancing.md).",
    )
    strategy_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the strategy (delay_race: min_grab_time, ...).",
    )
    max_events_per_partition: int = Field(
        default=100_000, description="At most this many new events per partition per run (>= 1)."
    )
    max_events_per_cycle: int | None = Field(
        default=20_000,
        description="At most this many events per partition in one claim cycle (>= 1): a run "
        "checkpoints in batches of this size and releases its leases between them, so a "
        "concurrent run over the same partitions claims its share, and the landed count moves "
        "at each batch. Unset reads a run's whole range in one cycle (one Spark job).",
    )
    lease_expiry_seconds: float = Field(
        default=60.0,
        description="A lease not renewed for this long (on the store's clock) may be taken over.",
    )
    on_data_loss: OnDataLoss = Field(
        default="fail",
        description="When events expired before being read: 'fail', or 'skip' (continue at the "
        "earliest retained event and report the gap).",
    )
    on_checkpoint_ahead: OnCheckpointAhead = Field(
        default="fail",
        description="A checkpoint the hub cannot have produced (past its last event, negative, "
        "or written for a hub since deleted and re-created): 'fail' (before anything is "
        "claimed), or 'reset_to_earliest' (move it back to just before the earliest retained "
        "event, drop its pending intent, record the reset in the report and the blobs' "
        "ehireset metadata). Opt in once, for the run that should reset.",
    )
    receive_timeout_seconds: float = Field(
        default=30.0, description="Event Hubs receive timeout per read, seconds (> 0)."
    )
    prefetch: int = Field(
        default=300, description=f"Events prefetched per receiver (1..{MAX_PREFETCH})."
    )
    max_readers_per_partition: int = Field(
        default=1,
        description="Spark input partitions (concurrent readers) per Event Hub partition range "
        f"(1..{MAX_READERS_PER_PARTITION}: Event Hubs allows {MAX_READERS_PER_PARTITION} per "
        "partition and consumer group).",
    )
    run_timeout_seconds: float | None = Field(
        default=None,
        description="Stop waiting for live peers after this long (the run then reports the "
        "partitions not up to date); unset waits while peers renew their leases.",
    )
    join_grace_seconds: float = Field(
        default=1.0,
        description="On its first cycle a run waits this long after its heartbeat so runs of one "
        "schedule tick see each other; 0 for a single owner.",
    )
    report_lag_seconds: bool = Field(
        default=True,
        description="Report how old the oldest unprocessed event of a lagging partition is.",
    )
    read_progress_seconds: float = Field(
        default=2.0,
        description="Live read progress: each Spark reader writes its running count to a small "
        "blob in the store at most this often (seconds), and the run shows events read of each "
        "range while Spark reads (0: off; a read shorter than this writes nothing).",
    )

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in STRATEGY_NAMES:
            raise ValueError(
                f"{value!r} is not valid; {_suggest(value, STRATEGY_NAMES)}valid: "
                f"{', '.join(STRATEGY_NAMES)}"
            )
        return value

    @field_validator("on_data_loss", mode="before")
    @classmethod
    def _on_data_loss(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ON_DATA_LOSS:
            raise ValueError(f"{value!r} is not valid; valid: {_quoted(ON_DATA_LOSS)}")
        return value

    @field_validator("on_checkpoint_ahead", mode="before")
    @classmethod
    def _on_checkpoint_ahead(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ON_CHECKPOINT_AHEAD:
            raise ValueError(f"{value!r} is not valid; valid: {_quoted(ON_CHECKPOINT_AHEAD)}")
        return value

    @field_validator("max_events_per_partition")
    @classmethod
    def _max_events(cls, value: int) -> int:
        return _at_least(value, 1, integer=True)

    @field_validator("max_events_per_cycle")
    @classmethod
    def _max_cycle(cls, value: int | None) -> int | None:
        return _at_least(value, 1, integer=True)

    @field_validator("lease_expiry_seconds")
    @classmethod
    def _lease(cls, value: float) -> float:
        return _above(value, 0, " (60 is typical)")

    @field_validator("receive_timeout_seconds")
    @classmethod
    def _receive(cls, value: float) -> float:
        return _above(value, 0, " (30 is typical)")

    @field_validator("prefetch")
    @classmethod
    def _prefetch(cls, value: int) -> int:
        if not 1 <= value <= MAX_PREFETCH:
            raise ValueError(f"{value!r} must be 1..{MAX_PREFETCH}")
        return value

    @field_validator("max_readers_per_partition")
    @classmethod
    def _readers(cls, value: int) -> int:
        if not 1 <= value <= MAX_READERS_PER_PARTITION:
            raise ValueError(
                f"{value!r} must be 1..{MAX_READERS_PER_PARTITION} (Event Hubs allows "
                f"{MAX_READERS_PER_PARTITION} readers per partition and consumer group)"
            )
        return value

    @field_validator("run_timeout_seconds")
    @classmethod
    def _timeout(cls, value: float | None) -> float | None:
        return _at_least(value, 0, " (0 gives up at once; unset waits while peers renew leases)")

    @field_validator("read_progress_seconds")
    @classmethod
    def _read_progress(cls, value: float) -> float:
        return _at_least(value, 0, " (2 is the default; 0 turns live read progress off)")

    @field_validator("join_grace_seconds")
    @classmethod
    def _grace(cls, value: float) -> float:
        return _at_least(value, 0, " (1 is the default; 0 for one owner)")

    def run_options(self) -> RunOptions:
        """Just the run options (drops what a subclass adds)."""
        return RunOptions.model_validate(
            {name: getattr(self, name) for name in RunOptions.model_fields}
        )

    def with_overrides(self, **overrides: Any) -> Self:
        """A copy with ``overrides`` applied and validated (None leaves a value unchanged)."""
        changes = {k: v for k, v in overrides.items() if v is not None}
        return self.replace(**changes) if changes else self

    def replace(self, **changes: Any) -> Self:
        """A validated copy with ``changes`` (``dataclasses.replace`` for these models)."""
        data = {name: getattr(self, name) for name in type(self).model_fields}
        data.update(changes)
        try:
            return type(self).model_validate(data)
        except ValidationError as exc:
            raise ConfigurationError(format_validation_error(exc)) from None


class IngestSpec(RunOptions):
    """Everything one pipeline needs: where to read, where to keep state, where to write, how.

    The document the CLI reads (plus ``spark``) and the core of the Component's defs.yaml.
    """

    eventhub: EventHubConfig = Field(description="The Event Hub to read.")
    store: StoreConfig = Field(description="The Blob container for leases and checkpoints.")
    sink: SinkConfig = Field(description="Where events land.")
