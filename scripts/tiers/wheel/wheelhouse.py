"""A wheelhouse of the PySpark wheels uv already built, for venvs installed with `uv pip`.

PySpark publishes only a ~456 MB source archive. `uv sync` from the lock finds the wheel uv built
from it, but every `uv pip install` of a fresh venv fetched the archive again and left another
~1.4 GB copy in uv's cache (70 copies in one afternoon filled the disk). So the venvs of
scripts/tiers/wheel.sh and bench/native_wheel.py install PySpark with `--find-links` from this
wheelhouse: for each `pyspark==X` pinned in the requirement files given, the wheel uv built
(found in its cache, linked, not copied, when on the same disk) or, the first time on a machine,
built once by uv into a throwaway venv.

    python scripts/tiers/wheel/wheelhouse.py REQUIREMENTS...   # prints the wheelhouse folder
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def wheelhouse() -> Path:
    """Where the wheels live: the package's cache folder (``EHINGEST_CACHE_DIR``)."""
    base = os.environ.get("EHINGEST_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ehingest"
    )
    return Path(base) / "wheelhouse"


def _built(version: str) -> Path | None:
    cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True)
    found = sorted(
        Path(cache.stdout.strip()).glob(f"sdists-v*/pypi/pyspark/{version}/*/pyspark-*.whl"),
        key=lambda p: p.stat().st_mtime,
    )
    return found[-1] if found else None


def ensure(version: str, house: Path) -> Path:
    """The wheelhouse's wheel of ``pyspark==version``, put there from uv's cache if needed."""
    target = house / f"pyspark-{version}-py2.py3-none-any.whl"
    if target.exists():
        return target
    built = _built(version)
    if built is None:  # first time on this machine: let uv build it once
        with tempfile.TemporaryDirectory(prefix="ehingest-pyspark-") as tmp:
            subprocess.run(["uv", "venv", "-q", tmp], check=True)
            python = str(Path(tmp) / "bin" / "python")
            subprocess.run(
                ["uv", "pip", "install", "-q", "--no-deps", "--python", python,
                 f"pyspark=={version}"],
                check=True,
            )  # fmt: skip
        built = _built(version)
        if built is None:
            raise SystemExit(f"uv built no wheel of pyspark {version} into its cache")
    house.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        os.link(built, partial)
    except OSError:  # another disk
        shutil.copyfile(built, partial)
    os.replace(partial, target)
    return target


def pinned(path: Path) -> list[str]:
    """The ``pyspark==X`` versions ``path`` pins for this interpreter (markers evaluated)."""
    from packaging.requirements import Requirement

    versions = []
    for line in path.read_text().splitlines():
        if re.match(r"^pyspark==", line):
            req = Requirement(line.split(" #")[0])
            if req.marker is None or req.marker.evaluate():
                versions += [s.version for s in req.specifier]
    return versions


def main() -> None:
    house = wheelhouse()
    for path in sys.argv[1:]:
        for version in pinned(Path(path)):
            ensure(version, house)
    print(house)


if __name__ == "__main__":
    main()
