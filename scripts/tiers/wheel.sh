#!/usr/bin/env bash
# Tier `wheel`: the BUILT wheel (not the checkout) in the environments users add it to.
#
# 1. Builds the sdist, the platform wheel from it (the reader's native step compiled in:
#    EHINGEST_BUILD_NATIVE=require, then `auditwheel repair` for its manylinux tag; the driver's
#    class preloader's jar too) and the pure wheel; checks what each holds (one import name,
#    py.typed, the compiled step and the jar or neither), and that the installed wheel's driver
#    takes the shipped jar.
# 2. Starts Azurite and the Event Hubs emulator (the wheel's own `ehingest emulator`), a
#    4-partition hub `telemetry`, and sends 50 + 100 + 150 + 200 numbered events.
# 3. Two fresh Dagster projects (create-dagster's layout, each with its own `resources.py` and
#    `ops/` package), the wheel installed with `[dagster]`:
#      newest: the locked versions (uv.lock);
#      oldest: the lowest versions the wheel declares, with dagster-azure
#              (scripts/tiers/wheel/oldest-dagster.txt, uv's `--resolution lowest-direct`;
#              dagster-azure raises azure-core and azure-storage-blob above their floors);
#    in each: `dg list components`, `dg scaffold defs dagster_eventhub_ingest.EventHubIngestComponent
#    telemetry`, `dg check defs`, one materialization of every partition against the emulator
#    and Azurite, and every sent event found in the sink exactly once.
# 4. The engine alone at every lower bound (scripts/tiers/wheel/oldest-engine.txt: pyspark 4.0,
#    azure-eventhub 5.12, azure-storage-blob 12.19, azure-core 1.30, pyarrow 18, pydantic 2.6...):
#    `ehingest run` lands every event exactly once.
# 5. An Airflow 3 deployment (the `airflow` extra and apache-airflow-providers-microsoft-azure,
#    locked): `airflow providers list` shows the provider, `import dagster` fails, connections
#    added with `airflow connections add` keep their type and pass `airflow connections test`,
#    the example DAG runs under `airflow dags test`, and every event landed exactly once.
#
# Venvs are installed with `uv pip install` from requirement files (exported from the lock, or
# the lowest set): every package comes from uv's cache when it is warm, PySpark from the wheels
# uv built before (scripts/tiers/wheel/wheelhouse.py); nothing is resolved afresh. Every service it starts is stopped on exit. Run by
# scripts/test.sh in the background beside the main run, or alone: bash scripts/tiers/wheel.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
source scripts/_bootstrap.sh >/dev/null
T0=$(date +%s)
step() { printf '== wheel [%3ss] %s\n' "$(( $(date +%s) - T0 ))" "$*"; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ehingest-wheel-XXXXXX")
EMULATOR_PID=""
cleanup() {
  local rc=$?
  set +e
  if [ -n "$EMULATOR_PID" ] && kill -0 "$EMULATOR_PID" 2>/dev/null; then
    kill -TERM -- "-$EMULATOR_PID" 2>/dev/null || kill -TERM "$EMULATOR_PID"
    for _ in $(seq 1 50); do kill -0 "$EMULATOR_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$EMULATOR_PID" 2>/dev/null
  fi
  bash scripts/azurite.sh stop --location "$WORK/azurite" >/dev/null 2>&1
  if [ "$rc" -ne 0 ] && [ "${KEEP:-0}" != 1 ]; then
    echo "wheel tier failed (exit $rc); KEEP=1 keeps $WORK" >&2
  fi
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# What the projects and the DAG read, and the test JVMs' cheaper settings (scripts/test.sh).
export DAGSTER_DISABLE_TELEMETRY=1
# Every read goes through the native step; a fallback to pure Python fails the tier.
export EHINGEST_NATIVE=1
unset PYSPARK_PYTHON PYSPARK_DRIVER_PYTHON SPARK_LOCAL_IP VIRTUAL_ENV

# -- 1. build ------------------------------------------------------------------------------------
step "building the sdist, the platform wheel from it, and the pure wheel"
EHINGEST_BUILD_NATIVE=require uv build -q -o "$WORK/dist"
PATH="$ROOT/.venv/bin:$PATH" "$ROOT/.venv/bin/auditwheel" repair -w "$WORK/wheelhouse" \
  "$WORK"/dist/*-linux_*.whl >"$WORK/auditwheel.log" 2>&1 || { cat "$WORK/auditwheel.log" >&2; exit 1; }
WHEEL=$(ls "$WORK"/wheelhouse/*manylinux*.whl)
EHINGEST_BUILD_NATIVE=off uv build -q --wheel -o "$WORK/pure"
PURE=$(ls "$WORK"/pure/*.whl)
echo "   $(basename "$WHEEL")"
echo "   $(basename "$PURE")"
"$ROOT/.venv/bin/python" - "$WHEEL" "$PURE" <<'EOF'
import sys, zipfile
platform, pure = (zipfile.ZipFile(p).namelist() for p in sys.argv[1:3])
assert "-none-any" in sys.argv[2], sys.argv[2]
for names in (platform, pure):
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"dagster_eventhub_ingest"}, tops
    assert "dagster_eventhub_ingest/py.typed" in names
    assert "dagster_eventhub_ingest/resources/eventhubs_source/fastpath/_amqp_columns.c" in names
so = [n for n in platform if n.endswith(".so")]
assert so == ["dagster_eventhub_ingest/resources/eventhubs_source/fastpath/_amqp_columns.cpython-311-x86_64-linux-gnu.so"], so
assert not [n for n in pure if n.endswith(".so")]
jar = "dagster_eventhub_ingest/resources/spark/java/ehingest-class-preload.jar"
assert jar in platform and jar not in pure
for names in (platform, pure):
    assert "dagster_eventhub_ingest/resources/spark/java/driver-classes.txt" in names
print("   one import name, py.typed, the compiled step and the preloader's jar in the platform wheel only")
EOF

# -- requirement files: the lock's exact versions, or the lowest set ----------------------------
export_reqs() {  # out args...
  local out=$1; shift
  uv export --frozen --no-emit-project --no-default-groups --no-hashes -q "$@" -o "$out"
}
export_reqs "$WORK/newest.txt" --extra dagster --group dagster-tools
export_reqs "$WORK/airflow.txt" --extra airflow --group airflow-test
cp scripts/tiers/wheel/oldest-dagster.txt "$WORK/oldest.txt"
cp scripts/tiers/wheel/oldest-engine.txt "$WORK/engine.txt"

# PySpark from the wheels uv already built (scripts/tiers/wheel/wheelhouse.py says why): a
# `uv pip install` of its source archive leaves a 1.4 GB copy in uv's cache every time.
WHEELHOUSE=$("$ROOT/.venv/bin/python" scripts/tiers/wheel/wheelhouse.py \
  "$WORK/newest.txt" "$WORK/oldest.txt" "$WORK/engine.txt" "$WORK/airflow.txt")
new_venv() {  # dir requirements package-spec...
  local dir=$1 req=$2; shift 2
  uv venv -q --python "$ROOT/.venv/bin/python" "$dir"
  uv pip install -q --python "$dir/bin/python" --find-links "$WHEELHOUSE" -r "$req" "$@"
}

step "installing the newest (locked) Dagster venv"
NEWEST_PROJECT="$WORK/newest/userproj"
mkdir -p "$NEWEST_PROJECT"
new_venv "$NEWEST_PROJECT/.venv" "$WORK/newest.txt" "dagster-eventhub-ingest[dagster] @ file://$WHEEL"
NEWEST_BIN="$NEWEST_PROJECT/.venv/bin"
# A driver without an archive takes the wheel's preloader jar: nothing compiles on the host.
# (From the project: the checkout's folder is not on the path.)
(cd "$NEWEST_PROJECT" && "$NEWEST_BIN/python" -) <<'EOF'
from dagster_eventhub_ingest.resources.spark import class_preload as p
jar = p.JAVA_DIR / p.JAR
assert "site-packages" in str(jar) and p.agent_jar({"PATH": "/nonexistent"}) == jar, jar
assert p.preload_java_options({}) == f"-javaagent:{jar}={p.JAVA_DIR / p.CLASS_LIST}"
EOF

# -- 2. services ---------------------------------------------------------------------------------
free_port() { "$NEWEST_BIN/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

step "starting Azurite and the emulator (the wheel's ehingest emulator)"
AZURE_STORAGE_CONNECTION_STRING=$(bash scripts/azurite.sh start --port "$(free_port)" \
  --location "$WORK/azurite" 2>"$WORK/azurite-start.log") || { cat "$WORK/azurite-start.log" >&2; exit 1; }
export AZURE_STORAGE_CONNECTION_STRING
EH_PORT=$(free_port)
setsid "$NEWEST_BIN/ehingest" emulator serve --port "$EH_PORT" --hub telemetry:4 \
  >"$WORK/emulator.out" 2>"$WORK/emulator.log" </dev/null &
EMULATOR_PID=$!
for _ in $(seq 1 150); do
  listening "$EH_PORT" && [ -s "$WORK/emulator.out" ] && break
  kill -0 "$EMULATOR_PID" 2>/dev/null || { cat "$WORK/emulator.log" >&2; exit 1; }
  sleep 0.2
done
EVENTHUB_CONNECTION_STRING=$(head -1 "$WORK/emulator.out")
export EVENTHUB_CONNECTION_STRING
for pid in 0 1 2 3; do
  "$NEWEST_BIN/ehingest" emulator send --hub telemetry --partition "$pid" \
    --count $(( (pid + 1) * 50 )) --size 64 >"$WORK/send-$pid.log" 2>&1 \
    || { cat "$WORK/send-$pid.log" >&2; exit 1; }
done
echo "   sent 50, 100, 150, 200 events to partitions 0-3"

# Every sent event in the sink exactly once: (partition, sequence number, body) as sent.
landed_once() {  # python sink-path format
  "$1" - "$2" "$3" <<'EOF'
import collections, sys
import pyarrow.dataset as ds
path, fmt = sys.argv[1:3]
if fmt == "deltalake":
    from deltalake import DeltaTable
    table = DeltaTable(path).to_pyarrow_table(columns=["partition", "sequenceNumber", "body"])
else:
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table(
        columns=["partition", "sequenceNumber", "body"])
rows = collections.Counter(
    (str(p), s, bytes(b)[:12].decode())
    for p, s, b in zip(*(table.column(c).to_pylist() for c in ("partition", "sequenceNumber", "body"))))
sent = collections.Counter(
    (str(p), s, f"{s:012d}") for p in range(4) for s in range((p + 1) * 50))
twice = {k: n for k, n in rows.items() if n > 1}
assert not twice, f"landed more than once: {sorted(twice)[:5]}"
assert rows == sent, f"missing {sorted(sent - rows)[:5]}, unexpected {sorted(rows - sent)[:5]}"
print(f"   {sum(rows.values())} events landed, each exactly once")
EOF
}

# -- 3. Dagster projects -------------------------------------------------------------------------
project_files() {  # project-dir name dependencies-toml
  local dir=$1 name=$2 deps=$3 src="$1/src/$2"
  mkdir -p "$src/defs" "$src/ops"
  # create-dagster's layout, and what a user adds: the extra in dependencies, their own
  # resources.py and ops package (generic names this package must not shadow).
  cat >"$dir/pyproject.toml" <<EOF
[project]
name = "$name"
version = "0.1.0"
requires-python = ">=3.10"
dependencies = [$deps]

[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[tool.dg]
directory_type = "project"

[tool.dg.project]
root_module = "$name"
EOF
  : >"$src/__init__.py"
  : >"$src/defs/__init__.py"
  cat >"$src/definitions.py" <<'EOF'
from pathlib import Path

from dagster import definitions, load_from_defs_folder

from .ops import USER_OP
from .resources import USER_RESOURCE

assert (USER_OP, USER_RESOURCE) == ("mine", "mine")


@definitions
def defs():
    return load_from_defs_folder(project_root=Path(__file__).parent.parent.parent)
EOF
  echo 'USER_RESOURCE = "mine"' >"$src/resources.py"
  echo 'USER_OP = "mine"' >"$src/ops/__init__.py"
}

dagster_project() {  # label project-dir extra-check
  local label=$1 dir=$2 bin="$2/.venv/bin" t
  t=$(date +%s)
  (
    cd "$dir"
    export VIRTUAL_ENV="$dir/.venv" PATH="$bin:$PATH"
    "$bin/python" -c "import dagster, pyspark, azure.eventhub as e; print(f'   dagster {dagster.__version__}, pyspark {pyspark.__version__}, azure-eventhub {e.__version__}')"
    "$bin/python" -c "import dagster_eventhub_ingest as p, sys; assert '.venv/lib' in p.__file__, p.__file__"
    "$bin/ehingest" build-reader | sed 's/^/   /'
    "$bin/dg" list components --json >"$dir/components.json" 2>"$dir/dg.log"
    grep -q '"key": "dagster_eventhub_ingest.EventHubIngestComponent"' "$dir/components.json" \
      || { echo "dg list components does not show the component" >&2; cat "$dir/dg.log" >&2; exit 1; }
    "$bin/dg" scaffold defs dagster_eventhub_ingest.EventHubIngestComponent telemetry >>"$dir/dg.log" 2>&1
    local yaml="$dir/src/userproj/defs/telemetry/defs.yaml"
    grep -q '^type: dagster_eventhub_ingest.EventHubIngestComponent$' "$yaml"
    "$bin/dg" check defs >>"$dir/dg.log" 2>&1 || { cat "$dir/dg.log" >&2; exit 1; }
    # What a user edits: the partition ids, their own container; a short lease for one run.
    sed -i "s/^  # partitions: \[0, 1, 2, 3\]/  partitions: [0, 1, 2, 3]/; s/container: eventhub-state/container: state-$label/" "$yaml"
    "$bin/dg" check defs >>"$dir/dg.log" 2>&1 || { cat "$dir/dg.log" >&2; exit 1; }
    echo "   dg list components, dg scaffold defs, dg check defs: ok"
    export DAGSTER_HOME="$dir/dagster_home"
    mkdir -p "$DAGSTER_HOME"
    printf 'telemetry:\n  enabled: false\n' >"$DAGSTER_HOME/dagster.yaml"
    "$bin/dagster" asset materialize -m userproj.definitions --select telemetry \
      --partition-range 0...3 >"$dir/materialize.log" 2>&1 \
      || { tail -n 60 "$dir/materialize.log" >&2; exit 1; }
    grep -q "RUN_SUCCESS" "$dir/materialize.log" || { tail -n 40 "$dir/materialize.log" >&2; exit 1; }
    landed_once "$bin/python" "$dir/data/telemetry" parquet
  )
  echo "   $label: done in $(( $(date +%s) - t )) s"
}

step "newest: a Dagster project at the locked versions"
project_files "$NEWEST_PROJECT" userproj '"dagster", "dagster-eventhub-ingest[dagster]"'
uv pip install -q --python "$NEWEST_BIN/python" --no-deps -e "$NEWEST_PROJECT"
dagster_project newest "$NEWEST_PROJECT"

step "oldest: a Dagster project at the lowest declared versions, with dagster-azure"
OLDEST_PROJECT="$WORK/oldest/userproj"
project_files "$OLDEST_PROJECT" userproj \
  '"dagster", "dagster-azure", "dagster-eventhub-ingest[dagster]"'
new_venv "$OLDEST_PROJECT/.venv" "$WORK/oldest.txt" "dagster-eventhub-ingest[dagster] @ file://$WHEEL"
uv pip install -q --python "$OLDEST_PROJECT/.venv/bin/python" --no-deps -e "$OLDEST_PROJECT"
"$OLDEST_PROJECT/.venv/bin/python" -c "import dagster_azure.blob, dagster_azure.adls2"
dagster_project oldest "$OLDEST_PROJECT"

# -- 4. the engine at its floor -----------------------------------------------------------------
step "engine: the base install at every lower bound, ehingest run"
ENGINE="$WORK/engine"
new_venv "$ENGINE/venv" "$WORK/engine.txt" "dagster-eventhub-ingest @ file://$WHEEL"
(
  cd "$ENGINE"
  "$ENGINE/venv/bin/python" -c "import pyspark, pyarrow, azure.eventhub as e, azure.storage.blob as b, azure.core as c, pydantic; print(f'   pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, azure-eventhub {e.__version__}, azure-storage-blob {b.__version__}, azure-core {c.__version__}, pydantic {pydantic.VERSION}')"
  if "$ENGINE/venv/bin/python" -c "import dagster" 2>/dev/null; then
    echo "the base install has Dagster in it" >&2; exit 1
  fi
  cat >"$ENGINE/config.yaml" <<EOF
eventhub:
  eventhub_name: telemetry
  credential: {connection_string_env: EVENTHUB_CONNECTION_STRING}
store:
  container: state-engine
  credential: {connection_string_env: AZURE_STORAGE_CONNECTION_STRING}
sink:
  path: $ENGINE/sink
spark:
  master: local[2]
EOF
  "$ENGINE/venv/bin/ehingest" run --config "$ENGINE/config.yaml" >"$ENGINE/run.log" 2>&1 \
    || { tail -n 60 "$ENGINE/run.log" >&2; exit 1; }
)
landed_once "$ENGINE/venv/bin/python" "$ENGINE/sink" parquet

# -- 5. Airflow ----------------------------------------------------------------------------------
step "airflow: an Airflow 3 deployment with the Azure provider (locked), the wheel's [airflow]"
AF="$WORK/airflow"
new_venv "$AF/venv" "$WORK/airflow.txt" "dagster-eventhub-ingest[airflow] @ file://$WHEEL"
AF_BIN="$AF/venv/bin"
if "$AF_BIN/python" -c "import dagster" 2>/dev/null; then
  echo "an Airflow install has Dagster in it" >&2; exit 1
fi
echo "   import dagster: fails (ModuleNotFoundError), as it should"
(
  cd "$AF"
  export PATH="$AF_BIN:$PATH" AIRFLOW_HOME="$AF/home"
  export AIRFLOW__CORE__DAGS_FOLDER="$AF/dags" AIRFLOW__CORE__LOAD_EXAMPLES=False
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AF/home/airflow.db"
  export AIRFLOW__CORE__TEST_CONNECTION=Enabled
  mkdir -p "$AF/dags" "$AF/home"
  # The user's DAG folder holds the shipped example DAG.
  echo 'from dagster_eventhub_ingest.airflow_provider.example_dags.eventhub_ingest import dag' \
    >"$AF/dags/eventhub_ingest.py"
  airflow db migrate >"$AF/db.log" 2>&1 || { tail -n 30 "$AF/db.log" >&2; exit 1; }
  airflow providers list -o json >"$AF/providers.json" 2>"$AF/providers.log"
  grep -q '"package_name": "dagster-eventhub-ingest"' "$AF/providers.json" \
    || { cat "$AF/providers.json" "$AF/providers.log" >&2; exit 1; }
  grep -q '"package_name": "apache-airflow-providers-microsoft-azure"' "$AF/providers.json"
  echo "   airflow providers list: dagster-eventhub-ingest (beside the Azure provider)"
  airflow connections add eventhub_default --conn-type azure_eventhub_ingest \
    --conn-password "$EVENTHUB_CONNECTION_STRING" --conn-schema telemetry >/dev/null
  airflow connections add eventhub_store_default --conn-type azure_eventhub_ingest \
    --conn-password "$AZURE_STORAGE_CONNECTION_STRING" \
    --conn-extra '{"container": "state-airflow"}' >/dev/null
  airflow connections add eventhub_sink_default --conn-type azure_eventhub_ingest \
    --conn-extra "{\"path\": \"$AF/sink\", \"spark\": {\"master\": \"local[2]\"}}" >/dev/null
  airflow connections get eventhub_default -o json | grep -q '"conn_type": "azure_eventhub_ingest"' \
    || { echo "the connection type was not kept" >&2; exit 1; }
  for conn in eventhub_default eventhub_store_default eventhub_sink_default; do
    airflow connections test "$conn" >"$AF/test-$conn.log" 2>&1 \
      && grep -q "Connection success" "$AF/test-$conn.log" \
      || { cat "$AF/test-$conn.log" >&2; exit 1; }
  done
  echo "   airflow connections add (type kept), airflow connections test: ok"
  # `airflow dags test` runs the deferred sensor's trigger in its own process, where only
  # environment and secrets-backend connections are seen (no metadata DB, as on a triggerer
  # with its API): the same three as AIRFLOW_CONN_* JSON, as a deployment's secrets would be.
  for conn in eventhub_default eventhub_store_default eventhub_sink_default; do
    export "AIRFLOW_CONN_${conn^^}=$(airflow connections get "$conn" -o json \
      | "$AF_BIN/python" -c 'import json, sys; c = json.load(sys.stdin)[0]; c["extra"] = c.get("extra_dejson"); print(json.dumps({k: c[k] for k in ("conn_type", "schema", "password", "extra") if c.get(k)}))')"
  done
  airflow dags test eventhub_ingest 2026-01-01 >"$AF/dags-test.log" 2>&1 \
    || { tail -n 60 "$AF/dags-test.log" >&2; exit 1; }
  grep -qE "state=success|DagRunState.SUCCESS|dag_run_state=success" "$AF/dags-test.log" \
    || { tail -n 60 "$AF/dags-test.log" >&2; exit 1; }
  echo "   airflow dags test eventhub_ingest: success"
)
landed_once "$AF_BIN/python" "$AF/sink" parquet
step "wheel tier passed"
echo "wheel: 4 passed, 0 failed"
