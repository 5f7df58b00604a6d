"""The wheel's build hook: the reader's native step compiled into a platform wheel.

``resources/eventhubs_source/fastpath/_amqp_columns.c`` is compiled for the building interpreter by
``loader.compile_module`` (loaded from its file: the package itself is not importable in the
build environment) and added to the wheel as
``dagster_eventhub_ingest/resources/eventhubs_source/fastpath/_amqp_columns<EXT_SUFFIX>``; the
wheel is then tagged for this interpreter and platform (``auditwheel repair`` turns
``linux_x86_64`` into the manylinux tag, scripts/tiers/wheel.sh). Editable installs (a checkout) get
nothing: they compile at run time, into the host's cache.

The local driver's class preloader (``resources/spark/java/ClassPreload.java``, a Java agent) is
compiled with the building host's ``javac`` by ``class_preload.build_jar`` and added as
``dagster_eventhub_ingest/resources/spark/java/ehingest-class-preload.jar``: a jar runs on any
platform's JVM, so it changes no tag.

``EHINGEST_BUILD_NATIVE``: unset or ``auto`` compiles when this host can and builds the pure
wheel (``py3-none-any``, compiled at run time where it runs) and leaves the jar out (compiled at
run time where a JDK is) when it cannot; ``require`` fails the build instead; ``off`` builds
neither.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

NATIVE_STEP = Path("dagster_eventhub_ingest", "resources", "eventhubs_source", "fastpath")
JAVA_DIR = Path("dagster_eventhub_ingest", "resources", "spark", "java")
MODE_ENV = "EHINGEST_BUILD_NATIVE"


class NativeStepHook(BuildHookInterface):
    """Compiles the native step and the class preloader into a standard (not editable) wheel."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        mode = os.environ.get(MODE_ENV, "auto").strip().lower()
        if self.target_name != "wheel" or version == "editable" or mode == "off":
            return
        if mode not in ("auto", "require"):
            raise ValueError(f"{MODE_ENV}={mode!r} is not valid; valid: auto, require, off")
        self._tmp = tempfile.mkdtemp(prefix="ehingest-build-")
        jar = self._compiled(
            mode,
            "the driver's class preloader",
            self._build_jar,
            "the wheel goes without it; it compiles at run time where a JDK is",
        )
        if jar is not None:
            build_data["force_include"][str(jar)] = (JAVA_DIR / jar.name).as_posix()
        native = self._compiled(
            mode,
            "the reader's native step",
            self._build_native,
            "building the pure wheel; it compiles at run time where a compiler is",
        )
        if native is not None:
            build_data["force_include"][str(native)] = (NATIVE_STEP / native.name).as_posix()
            build_data["pure_python"] = False
            build_data["infer_tag"] = True

    def _compiled(
        self, mode: str, what: str, build: Callable[[], Path], otherwise: str
    ) -> Path | None:
        """What ``build`` compiled, or None with a warning (``auto``); ``require`` fails."""
        try:
            return build()
        except RuntimeError as exc:
            if mode == "require":
                raise RuntimeError(f"{what} did not compile: {exc}") from exc
            self.app.display_warning(f"{what} did not compile ({exc}): {otherwise}")
            return None

    def _build_native(self) -> Path:
        folder = Path(self.root, NATIVE_STEP)
        native = _load(folder / "loader.py")
        target = Path(self._tmp, f"_amqp_columns{sysconfig.get_config_var('EXT_SUFFIX')}")
        return native.compile_module(target, (folder / "_amqp_columns.c").read_bytes())

    def _build_jar(self) -> Path:
        folder = Path(self.root, JAVA_DIR)
        preload = _load(folder.parent / "class_preload.py")
        javac = preload.find_javac()
        if javac is None:
            raise RuntimeError("no javac (a JDK's) on this host")
        source = (folder / preload.SOURCE).read_bytes()
        return preload.build_jar(Path(self._tmp, preload.JAR), source, javac)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location("_ehingest_native_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
