"""Where configuration text comes from: YAML documents and ``${VAR}`` references.

Both are checked here, once, for whichever surface reads them (the ``ehingest`` config file,
a test, a script building an :class:`~dagster_eventhub_ingest.resources.config.PipelineConfig`):

* :func:`load_yaml` refuses a document whose aliases expand past :data:`MAX_YAML_VALUES`
  values (a kilobyte of nested aliases, a "billion laughs", expands to billions: every walk of
  it would take hours), an alias that contains itself, and nesting deeper than
  :data:`MAX_YAML_DEPTH`. The check walks each distinct node once, so it answers in
  milliseconds whatever the document claims to expand to.
* :func:`expand_env` replaces ``${VAR}`` by the environment variable. Unset is an error, and so
  is a variable that is set but empty (or blank) inside a longer value: ``${ROOT}/telemetry``
  with ``ROOT=""`` would silently become ``/telemetry``, at the file system's root. A value
  that is nothing but ``${VAR}`` may be empty; the key's own check then judges it (an empty sink
  path is refused).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from dagster_eventhub_ingest.resources.errors import ConfigurationError, redact

__all__ = ["ENV_REFERENCE", "MAX_YAML_DEPTH", "MAX_YAML_VALUES", "expand_env", "load_yaml"]

#: ``${NAME}``: a reference to an environment variable in a configuration value.
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: Values (scalars, lists, mappings) a document may hold once its aliases are expanded. A
#: full config file holds a few hundred.
MAX_YAML_VALUES = 10_000
#: How deeply lists and mappings may nest.
MAX_YAML_DEPTH = 64


def load_yaml(text: str, *, where: str) -> Any:
    """The YAML document in ``text`` (safe types only), after checking what its aliases expand
    to; ``where`` names the source in errors (e.g. ``--config 'run.yaml'``).

    Raises:
        ConfigurationError: not valid YAML, or larger, deeper or more self-referring once
            expanded than a configuration can be.
    """
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigurationError(
                f"{where}: nested more than Python can parse; a configuration nests a few levels"
            ) from None
        if node is None:
            return None
        _check_expansion(node, where)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{where}: not valid YAML: {redact(str(exc))}") from None
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node, where: str) -> None:
    """Refuse aliases that expand too far, refer to themselves, or nest too deeply.

    Iterative, each distinct node visited once: the expanded size of a node is one plus its
    children's, and an alias shares the node it names, so the sizes of shared nodes are
    reused instead of walked again.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool, int]] = [(root, False, 1)]
    while stack:
        node, done, depth = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            open_nodes.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[key] > MAX_YAML_VALUES:
                raise ConfigurationError(
                    f"{where}: its aliases (*name) expand to more than {MAX_YAML_VALUES:,} "
                    "values; a configuration holds a few hundred. Write the values out, or use "
                    "fewer nested aliases"
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ConfigurationError(
                f"{where}: an alias (*name) refers to a value that contains it, which would "
                "expand forever"
            )
        if depth > MAX_YAML_DEPTH:
            raise ConfigurationError(
                f"{where}: lists and mappings nest more than {MAX_YAML_DEPTH} levels deep"
            )
        open_nodes.add(key)
        stack.append((node, True, depth))
        for child in children:
            if id(child) in open_nodes:
                raise ConfigurationError(
                    f"{where}: an alias (*name) refers to a value that contains it, which "
                    "would expand forever"
                )
            if id(child) not in sizes:
                stack.append((child, False, depth + 1))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def expand_env(node: Any, key: str, env: Mapping[str, str]) -> Any:
    """``node`` (a loaded document, or any part of one at ``key``) with every ``${VAR}`` in its
    strings replaced from ``env``.

    Raises:
        ConfigurationError: a variable is unset, or empty inside a longer value; the message
            names the key and the variable (never a value).
    """
    if isinstance(node, Mapping):
        return {k: expand_env(v, f"{key}.{k}" if key else str(k), env) for k, v in node.items()}
    if isinstance(node, list):
        return [expand_env(v, f"{key}[{i}]", env) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return node
    whole = ENV_REFERENCE.fullmatch(node) is not None

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in env:
            raise ConfigurationError(
                f"{key}: environment variable {name} (from '${{{name}}}') is not set; export "
                "it before running"
            )
        value = env[name]
        if not whole and not value.strip():
            raise ConfigurationError(
                f"{key}: environment variable {name} (from '${{{name}}}') is empty inside "
                f"{node!r}: a path built from it would point somewhere else (e.g. '${{{name}}}/x' "
                "becomes '/x', at the root of the file system). Set it, or write the value "
                "without it"
            )
        return value

    return ENV_REFERENCE.sub(sub, node)
