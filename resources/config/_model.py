"""The base of every config model: strict keys with a did-you-mean, one-line errors, checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Self

from dagster_eventhub_ingest.resources.errors import ConfigurationError, did_you_mean, redact


def setting(*args: Any, description: str, **kwargs: Any) -> Any:
    """A pydantic ``Field`` with its description, also under ``json_schema_extra``.

    Schemas derived from these models keep it: Dagster derives a Component's YAML schema from
    the model and replaces the description of every field with a default by its resolver's
    (none), while it merges ``json_schema_extra`` through. Used for every setting, so
    ``dg utils inspect-component`` and the UI's component page show what each key does.
    """
    extra = {"description": description, **kwargs.pop("json_schema_extra", {})}
    return Field(*args, description=description, json_schema_extra=extra, **kwargs)


_suggest = did_you_mean


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


def _unknown_key_message(key: str, valid: list[str], nested: Mapping[str, set[str]]) -> str:
    """``key: unknown key; did you mean 'x'? valid keys: ...`` (one wording everywhere).

    ``nested`` (a key of a block inside -> the blocks' keys, from :func:`_nested_keys`) places a
    key written one level too high (``max_lag_events`` belongs in ``lag_check``) and lets the
    did-you-mean name a key inside a block (``credential.connection_string_env``).
    """
    blocks = nested.get(key, set())
    if len(blocks) == 1:
        (block,) = blocks
        return f"{key}: unknown key here; it belongs in {block}: write {block}: {{{key}: ...}}"
    inside = sorted(f"{block}.{name}" for name, owners in nested.items() for block in owners)
    hint = _suggest(key, valid) or _suggest(key, inside)
    return f"{key}: unknown key; {hint}valid keys: {', '.join(valid)}"


def _field_names(cls: type[BaseModel]) -> list[str]:
    names: list[str] = []
    for name, info in cls.model_fields.items():
        names.append(info.alias or name)
    return names


def _nested_keys(cls: type[BaseModel]) -> dict[str, set[str]]:
    """Each key of a block nested in ``cls`` (not a key of ``cls`` itself) -> the blocks' keys
    (``credential``, ``lag_check``)."""
    own = set(_field_names(cls))
    found: dict[str, set[str]] = {}
    for name, info in cls.model_fields.items():
        annotation = info.annotation
        members = get_args(annotation) if get_args(annotation) else (annotation,)
        for member in members:
            if isinstance(member, type) and not get_args(member) and issubclass(member, BaseModel):
                for key in _field_names(member):
                    if key not in own:
                        found.setdefault(key, set()).add(info.alias or name)
    return found


class StrictModel(BaseModel):
    """Base of every config model: frozen, unknown keys rejected with a did-you-mean.

    Numbers and booleans are checked strictly (``"5"`` is not an integer, ``1`` is not true):
    a quoted number in YAML is a mistake worth reporting, not guessing.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=False)

    @model_validator(mode="before")
    @classmethod
    def _check_keys(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        valid = _field_names(cls)
        for key in data:
            if key not in valid:
                raise ValueError(_unknown_key_message(str(key), valid, _nested_keys(cls)))
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
    :class:`~dagster_eventhub_ingest.resources.errors.ConfigurationError` in one line, not
    pydantic's dump.

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
