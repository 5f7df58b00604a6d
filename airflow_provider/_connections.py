"""Airflow connections -> the project's validated settings (pure: no Airflow import needed).

Three connections, one per service, so each can be shared and rotated on its own:

- Event Hubs (``eventhub_default``): ``password`` = the namespace connection string (a listen
  policy is enough); ``schema`` or ``extra.eventhub_name`` = the hub; ``extra.consumer_group``
  (default ``$Default``). Without a password: ``host`` (or ``extra.fully_qualified_namespace``)
  = ``myns.servicebus.windows.net`` and ``extra.credential = "default_azure_credential"``.
- Storage (``eventhub_store_default``): ``password`` = the storage connection string;
  ``extra.container`` (leases and checkpoints), ``extra.create_container`` (default true).
  Without a password: ``host`` (or ``extra.account_url``) = ``https://acct.blob.core.windows.net``
  and ``extra.credential = "default_azure_credential"``.
- Either ``extra.credential`` may instead be a mapping of DefaultAzureCredential's options, the
  YAML's ``credential:`` keys (``managed_identity_client_id``, ``tenant_id``, ``exclude_*``),
  validated by ``resources/config/``.
- Sink (``eventhub_sink_default``): ``extra.format`` (default ``parquet``), ``extra.path`` or
  ``extra.table``, ``extra.partition_by``, ``extra.shared`` (a local path every node mounts),
  ``extra.sources`` (``one`` or ``many``: whether several hubs or consumer groups share it);
  optional ``extra.spark`` = ``{"master": ... or "remote": "sc://...", "app_name": ...,
  "conf": {...}, "ship_code": true}`` for the SparkSession the task starts.
- The store may instead be an existing ``wasb`` connection of the Azure provider
  (apache-airflow-providers-microsoft-azure), read as ``WasbHook`` reads it: a connection
  string, an account key (``login`` + ``password``, or ``extra.shared_access_key``), a SAS token,
  or, with none of these, DefaultAzureCredential (``extra.managed_identity_client_id``,
  ``extra.workload_identity_tenant_id``); the container then comes from the task
  (``store_container``). A service principal (``extra.tenant_id``) is refused with a message.

Extra keys left empty (the connection form saves its empty fields) count as not set.

Secrets live only in the ``password`` field, which Airflow encrypts and masks in task logs; a
secret written into ``extra`` is rejected with an error saying where it belongs. Every error
names the connection id and the field, never the secret. The settings objects built here are the
same ones the ``ehingest`` CLI and the Dagster resources build, with the same validation.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, Protocol

from dagster_eventhub_ingest.airflow_provider._form import CONN_TYPE, WASB_CONN_TYPE
from dagster_eventhub_ingest.ops.run.settings import IngestSettings
from dagster_eventhub_ingest.resources.azure.credentials import CredentialOptions, CredentialType
from dagster_eventhub_ingest.resources.config import (
    EventHubIdentityCredential,
    IngestConfig,
    SinkConfig,
    SparkConfig,
    StoreIdentityCredential,
)
from dagster_eventhub_ingest.resources.errors import ConfigurationError, redact
from dagster_eventhub_ingest.resources.settings import EventHubSettings, entity_path
from dagster_eventhub_ingest.resources.sink import SinkSettings
from dagster_eventhub_ingest.resources.store.settings import StoreSettings

__all__ = [
    "DEFAULT_EVENTHUB_CONN_ID",
    "DEFAULT_SINK_CONN_ID",
    "DEFAULT_STORE_CONN_ID",
    "ConnectionLike",
    "SparkSettings",
    "check_run_options",
    "connection_role",
    "eventhub_settings",
    "ingest_settings",
    "sink_settings",
    "spark_settings",
    "store_settings",
]

DEFAULT_EVENTHUB_CONN_ID = "eventhub_default"
DEFAULT_STORE_CONN_ID = "eventhub_store_default"
DEFAULT_SINK_CONN_ID = "eventhub_sink_default"
Role = Literal["Event Hubs", "storage", "sink"]

_CREDENTIALS: tuple[CredentialType, ...] = ("default_azure_credential",)
_SECRET_RE = re.compile(r"(?i)\b(SharedAccessKey|AccountKey|SharedAccessSignature|sig)=[^;&\s]+")
_EVENTHUB_EXTRA = {"eventhub_name", "consumer_group", "fully_qualified_namespace", "credential"}
_STORE_EXTRA = {"container", "create_container", "account_url", "credential"}
# The sink's keys of resources/config/ SinkConfig (storage options are for delta-rs on abfss,
# whose secrets have no place in an extra), and the task's SparkSession.
_SINK_EXTRA = (set(SinkConfig.model_fields) - {"storage_options"}) | {"spark"}
# Run options a DAG may set on the operator: resources/config/ IngestConfig.
RUN_OPTIONS = tuple(IngestConfig.model_fields)
# Where Jinja starts in a string Airflow renders (its default delimiters).
_TEMPLATE_STARTS = ("{{", "{%", "{#")


class ConnectionLike(Protocol):
    """The fields of an Airflow ``Connection`` read here (``airflow.sdk.Connection`` has them)."""

    conn_id: str
    conn_type: str | None
    host: str | None
    schema: str | None
    login: str | None
    password: str | None

    @property
    def extra_dejson(self) -> dict[str, Any]: ...


#: How the task starts its SparkSession (``extra.spark`` of the sink connection): the
#: :class:`dagster_eventhub_ingest.resources.config.SparkConfig` of the CLI's ``spark:`` block.
SparkSettings = SparkConfig
#: The Spark application name of Airflow tasks (when ``extra.spark.app_name`` is not given).
AIRFLOW_APP_NAME = "ehingest-airflow"


def _given(value: Any) -> bool:
    return value is not None and value != ""


def _extras(conn: ConnectionLike) -> dict[str, Any]:
    """The connection's extra keys that hold a value (the form saves empty fields)."""
    return {k: v for k, v in dict(conn.extra_dejson or {}).items() if _given(v)}


def connection_role(conn: ConnectionLike) -> Role:
    """Which of the three a connection is, from its fields (for ``test_connection``)."""
    if conn.conn_type == WASB_CONN_TYPE:
        return "storage"
    keys = set(_extras(conn))
    if keys & (_SINK_EXTRA - _EVENTHUB_EXTRA):
        return "sink"
    if keys & {"container", "create_container", "account_url"}:
        return "storage"
    return "Event Hubs"


def _extra(conn: ConnectionLike, role: str, valid: set[str]) -> dict[str, Any]:
    extra = _extras(conn)
    unknown = sorted(set(extra) - valid)
    if unknown:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): extra.{unknown[0]} is not a known "
            f"key; valid extra keys: {', '.join(sorted(valid))}"
        )
    _no_secret_in_extra(conn.conn_id, role, extra, "extra")
    return extra


def _no_secret_in_extra(conn_id: str, role: str, node: Any, key: str) -> None:
    if isinstance(node, Mapping):
        for k, v in node.items():
            _no_secret_in_extra(conn_id, role, v, f"{key}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _no_secret_in_extra(conn_id, role, v, f"{key}[{i}]")
    elif isinstance(node, str) and _SECRET_RE.search(node):
        raise ConfigurationError(
            f"Airflow connection {conn_id!r} ({role}): {key} holds a secret; put the "
            "connection string in the connection's password field (Airflow encrypts it and "
            "masks it in logs), never in extra"
        )


def _credential(
    conn: ConnectionLike, role: str, extra: Mapping[str, Any]
) -> tuple[CredentialType, dict[str, Any]]:
    """The credential type and, for DefaultAzureCredential, its options (``extra.credential``:
    the string ``default_azure_credential``, or a mapping of the options as in YAML)."""
    value = extra.get("credential")
    if value is None:
        return "connection_string", {}
    if isinstance(value, Mapping):
        return "default_azure_credential", dict(value)
    if value not in _CREDENTIALS:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): extra.credential={redact(repr(value))}"
            f" is not valid; valid: {', '.join(_CREDENTIALS)} (or put a connection string in "
            "the password field)"
        )
    return "default_azure_credential", {}


class _Access(NamedTuple):
    """How a connection reaches its service: a connection string, or a place and an identity."""

    credential_type: CredentialType
    connection_string: str | None
    #: The namespace / account URL (host or extra); what the identity credential connects to.
    place: str | None
    options: CredentialOptions


def _access(
    conn: ConnectionLike,
    role: str,
    extra: Mapping[str, Any],
    model: type[EventHubIdentityCredential] | type[StoreIdentityCredential],
    place: tuple[str, str],
) -> _Access:
    """How the Event Hubs or the store connection authenticates, read alike for both.

    A connection string in ``password``, or ``extra.credential`` (validated by the YAML's
    identity ``model``) with a place: ``extra.<key>`` or ``host``, where ``place`` is ``(key,
    what the error calls it)``.
    """
    key, place_name = place
    credential, options = _credential(conn, role, extra)
    conn_str = conn.password or None
    if conn_str and credential != "connection_string":
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): give either a connection string "
            f"(password) or extra.credential with {place_name} (host), not both"
        )
    where = extra.get(key) or conn.host or None
    if credential == "connection_string":
        return _Access("connection_string", conn_str, where, ())
    fields = {**({key: where} if where else {}), **options, "credential_type": credential}
    ident = _wrap(conn, role, lambda: model.from_dict(fields, where="extra.credential"))
    return _Access(credential, None, getattr(ident, key), ident.credential_options())


def _wrap(conn: ConnectionLike, role: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except ConfigurationError as exc:
        raise ConfigurationError(f"Airflow connection {conn.conn_id!r} ({role}): {exc}") from None


def eventhub_settings(conn: ConnectionLike) -> EventHubSettings:
    """The Event Hubs settings of an Airflow connection (see the module docstring)."""
    role = "Event Hubs"
    extra = _extra(conn, role, _EVENTHUB_EXTRA)
    cred = _access(
        conn, role, extra, EventHubIdentityCredential, ("fully_qualified_namespace", "a namespace")
    )
    conn_str = cred.connection_string
    name = extra.get("eventhub_name") or conn.schema
    if not name and conn_str:
        # The SDK accepts a hub named by EntityPath in the connection string: so do we, read by
        # the parser EventHubSettings checks it with.
        name = _wrap(conn, role, lambda: entity_path(conn_str))
    if not name:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): no Event Hub name; set the "
            "connection's schema field or extra.eventhub_name (e.g. 'telemetry')"
        )
    return _wrap(
        conn,
        role,
        lambda: EventHubSettings(
            eventhub_name=str(name),
            consumer_group=str(extra.get("consumer_group") or "$Default"),
            connection_string=conn_str,
            fully_qualified_namespace=cred.place,
            credential_type=cred.credential_type,
            credential_options=cred.options,
        ),
    )


def store_settings(conn: ConnectionLike, container: str | None = None) -> StoreSettings:
    """The lease and checkpoint store settings of an Airflow connection.

    ``container`` is the task's ``store_container``: required for a ``wasb`` connection (which
    has no container field), else it must agree with ``extra.container`` when both are given.
    """
    role = "storage"
    if conn.conn_type == WASB_CONN_TYPE:
        return _wasb_store_settings(conn, container)
    extra = _extra(conn, role, _STORE_EXTRA)
    cred = _access(conn, role, extra, StoreIdentityCredential, ("account_url", "an account URL"))
    if container and extra.get("container") and container != extra["container"]:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): extra.container="
            f"{extra['container']!r} but the task's store_container={container!r}; give one"
        )
    container = container or extra.get("container")
    if not container:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): extra.container is required (the "
            "Blob container for leases and checkpoints, e.g. 'eventhub-state'), or the task's "
            "store_container"
        )
    create = extra.get("create_container", True)
    if not isinstance(create, bool):
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): extra.create_container="
            f"{redact(repr(create))} must be true or false"
        )
    return _wrap(
        conn,
        role,
        lambda: StoreSettings(
            container=str(container),
            connection_string=cred.connection_string,
            account_url=cred.place,
            credential_type=cred.credential_type,
            credential_options=cred.options,
            create_container=create,
        ),
    )


def _wasb_store_settings(conn: ConnectionLike, container: str | None) -> StoreSettings:
    """A ``wasb`` connection (the Azure provider's ``WasbHook``) as the store, read in the
    order ``WasbHook.get_conn`` reads it; secrets stay in the settings' connection string."""
    role = "storage, a wasb connection"
    if not container:
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}) has no container field; give the "
            "task's store_container (the Blob container for leases and checkpoints, e.g. "
            "'eventhub-state')"
        )
    extra = _extras(conn)
    _no_secret_in_extra(
        conn.conn_id,
        role,
        {k: v for k, v in extra.items() if k not in _WASB_SECRETS},
        "extra",
    )
    conn_str = _wasb_field(extra, "connection_string")
    if conn_str:
        return _wrap(conn, role, lambda: StoreSettings(container, connection_string=conn_str))
    if _wasb_field(extra, "tenant_id"):
        raise ConfigurationError(
            f"Airflow connection {conn.conn_id!r} ({role}): a service principal (tenant_id with "
            "a client secret) is not supported for the store; use a connection string, an "
            "account key, a SAS token or a managed identity on this connection, or a "
            f"{CONN_TYPE!r} connection"
        )
    account_url = _wasb_account_url(conn)
    key = (
        _wasb_field(extra, "shared_access_key")
        or conn.password
        or _wasb_field(extra, "account_key")
    )
    sas = _wasb_field(extra, "sas_token")
    secret: str | None = None
    if key:
        name = conn.login or _account_name(account_url)
        if not name or not account_url:
            raise _no_account(conn, role)
        secret = (
            f"DefaultEndpointsProtocol={account_url.split(':', 1)[0]};AccountName={name};"
            f"AccountKey={key};BlobEndpoint={account_url}"
        )
    elif sas:
        # A whole URL with its token (WasbHook takes it as the account URL), or the token.
        endpoint, _, token = sas.partition("?") if sas.startswith("https") else (None, "", sas)
        endpoint = endpoint or account_url
        if not endpoint:
            raise _no_account(conn, role)
        secret = f"BlobEndpoint={endpoint};SharedAccessSignature={token}"
    if secret is not None:
        return _wrap(conn, role, lambda: StoreSettings(container, connection_string=secret))
    if not account_url:
        raise _no_account(conn, role)
    options = {
        "managed_identity_client_id": _wasb_field(extra, "managed_identity_client_id"),
        "tenant_id": _wasb_field(extra, "workload_identity_tenant_id"),
    }
    fields = {
        "account_url": account_url,
        "credential_type": "default_azure_credential",
        **{k: v for k, v in options.items() if v},
    }
    ident = _wrap(conn, role, lambda: StoreIdentityCredential.from_dict(fields, where="extra"))
    return _wrap(
        conn,
        role,
        lambda: StoreSettings(
            container,
            account_url=ident.account_url,
            credential_type="default_azure_credential",
            credential_options=ident.credential_options(),
        ),
    )


#: The extra keys of a ``wasb`` connection that hold a secret by design (its form's password
#: fields); any other extra value that looks like one is refused as for this package's type.
_WASB_SECRETS = frozenset({"connection_string", "shared_access_key", "sas_token", "account_key"})


def _wasb_field(extra: Mapping[str, Any], name: str) -> str | None:
    """An extra field as ``WasbHook`` reads it: plain, or with the old ``extra__wasb__`` prefix."""
    value = extra.get(name) or extra.get(f"extra__{WASB_CONN_TYPE}__{name}")
    return str(value) if _given(value) else None


def _wasb_account_url(conn: ConnectionLike) -> str | None:
    """The account URL as ``WasbHook`` makes it: ``host`` (https:// when it has no scheme), or
    the public cloud's URL of the account named in ``login``."""
    host = (conn.host or "").strip()
    public = f"{conn.login}.blob.core.windows.net" if conn.login else None
    if not host:
        return f"https://{public}" if public else None
    scheme, _, rest = (host if "://" in host else f"https://{host}").partition("://")
    netloc, _, path = rest.partition("/")
    if "." not in netloc:  # not a DNS name (an Active Directory id): the login's account
        if public is None:
            return None
        netloc = public
    return f"{scheme}://{netloc}/{path}".rstrip("/")


def _account_name(account_url: str | None) -> str | None:
    if not account_url:
        return None
    netloc = account_url.split("://", 1)[-1].split("/")
    # Azurite and other emulators: http://127.0.0.1:10000/<account>
    if len(netloc) > 1 and netloc[1]:
        return netloc[1]
    return netloc[0].split(".", 1)[0] or None


def _no_account(conn: ConnectionLike, role: str) -> ConfigurationError:
    return ConfigurationError(
        f"Airflow connection {conn.conn_id!r} ({role}): no storage account; set login (the "
        "account name) or host (the account URL, e.g. https://myaccount.blob.core.windows.net)"
    )


def sink_settings(conn: ConnectionLike) -> SinkSettings:
    """Where events land, from the sink connection's extra."""
    role = "sink"
    extra = _extra(conn, role, _SINK_EXTRA)
    fields = {k: v for k, v in extra.items() if k != "spark"}
    sink: SinkSettings = _wrap(
        conn, role, lambda: SinkConfig.from_dict(fields, where="extra").settings()
    )
    spark = spark_settings(conn)
    from dagster_eventhub_ingest.ops.sinks.checks import check_sink_reachable

    # Before anything is claimed or a JVM starts: a local path a cluster cannot share.
    _wrap(
        conn,
        role,
        lambda: check_sink_reachable(sink, local=spark.is_local, engine=spark.engine),
    )
    return sink


def spark_settings(conn: ConnectionLike) -> SparkSettings:
    """The SparkSession settings in the sink connection's ``extra.spark`` (defaults: local[2])."""
    role = "sink"
    spark = _extra(conn, role, _SINK_EXTRA).get("spark") or {}
    if isinstance(spark, Mapping) and "app_name" not in spark:
        spark = {**spark, "app_name": AIRFLOW_APP_NAME}
    config: SparkConfig = _wrap(
        conn, role, lambda: SparkConfig.from_dict(spark, where="extra.spark")
    )
    return config


def check_run_options(options: Any) -> None:
    """Check the operator's run options when the DAG file is parsed, as the run checks them.

    ``options`` is a templated field, so a value Airflow may still change (a string with a
    Jinja template in it, a mapping or list holding one, an ``XComArg``) is checked once
    rendered, by :func:`ingest_settings` in ``execute``; every key and every other value is
    checked now. The message is the CLI's: ``options.<key>: what is wrong; what is valid``.
    """
    if not isinstance(options, Mapping):
        return  # rendered as a whole (an XComArg): checked in execute
    known = set(RUN_OPTIONS)
    now = {k: v for k, v in options.items() if k not in known or not _rendered_later(v)}
    IngestConfig.from_dict(now, where="options")


def _rendered_later(value: Any) -> bool:
    if isinstance(value, str):
        return any(start in value for start in _TEMPLATE_STARTS)
    if isinstance(value, Mapping):
        return any(_rendered_later(v) for v in value.values())
    if isinstance(value, list | tuple | set | frozenset):
        return any(_rendered_later(v) for v in value)
    # Plain values stay as they are; any other object may be one Airflow resolves.
    return not isinstance(value, bool | int | float | None)


def ingest_settings(
    eventhub: EventHubSettings,
    store: StoreSettings,
    sink: SinkSettings,
    options: Mapping[str, Any] | None = None,
) -> IngestSettings:
    """The run's ``IngestSettings``; ``options`` are the operator's run options (validated)."""
    run = IngestConfig.from_dict(dict(options or {}), where="options")
    return IngestSettings(eventhub=eventhub, store=store, sink=sink, **run.model_dump())


def partition_list(partition_ids: Sequence[str | int] | str | None) -> list[str] | None:
    """Partition ids as strings (templated fields and YAML may give ints); None means all."""
    if partition_ids is None or partition_ids == []:
        return None
    if isinstance(partition_ids, str | int):
        partition_ids = [partition_ids]
    return [str(p) for p in partition_ids]
