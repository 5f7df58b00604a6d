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
        self._tmp = tempfile.mkdtemp(prefix="ehingest-native-")
        self._preload_jar(build_data, mode)
        folder = Path(self.root, NATIVE_STEP)
        native = _load(folder / "loader.py")
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        target = Path(self._tmp, f"_amqp_columns{suffix}")
        try:
            native.compile_module(target, (folder / "_amqp_columns.c").read_bytes())
        except RuntimeError as exc:
            if mode == "require":
                raise RuntimeError(f"the reader's native step did not compile: {exc}") from exc
            self.app.display_warning(
                f"the reader's native step did not compile ({exc}): building the pure wheel; "
                "it compiles at run time where a compiler is"
            )
            return
        build_data["force_include"][str(target)] = (NATIVE_STEP / target.name).as_posix()
        build_data["pure_python"] = False
        build_data["infer_tag"] = True

    def _preload_jar(self, build_data: dict[str, Any], mode: str) -> None:
        folder = Path(self.root, JAVA_DIR)
        preload = _load(folder.parent / "class_preload.py")
        target = Path(self._tmp, preload.JAR)
        javac = preload.find_javac()
        try:
            if javac is None:
                raise RuntimeError("no javac (a JDK's) on this host")
            preload.build_jar(target, (folder / preload.SOURCE).read_bytes(), javac)
        except RuntimeError as exc:
            if mode == "require":
                raise RuntimeError(f"the driver's class preloader did not compile: {exc}") from exc
            self.app.display_warning(
                f"the driver's class preloader did not compile ({exc}): the wheel goes without "
                "it; it compiles at run time where a JDK is"
            )
            return
        build_data["force_include"][str(target)] = (JAVA_DIR / target.name).as_posix()

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
