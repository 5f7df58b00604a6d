# Sourced by scripts: install uv, the locked Python deps and the pinned Azurite, set local env.
# Idempotent and quick when everything is already there.
UV_VERSION=0.13.9
if ! command -v uv >/dev/null 2>&1; then
  echo "== installing uv $UV_VERSION" >&2
  python3 -m pip install --quiet "uv==$UV_VERSION" >&2 || python3 -m pip install --quiet --user "uv==$UV_VERSION" >&2
  export PATH="$HOME/.local/bin:$PATH"
fi
# Every venv uv installs gets its bytecode compiled, as pip does by default: with
# PYTHONDONTWRITEBYTECODE set (many CI images and containers) nothing is cached on import, and each
# of the tests' processes compiles its imports again (`import dagster`: 2.2 s, against 1.0 s).
export UV_COMPILE_BYTECODE=1
uv sync --frozen --quiet >&2
# The reader's native step (resources/eventhubs_source/fastpath/loader.py), compiled once per host ahead of
# any read task; a host that cannot compile it reads in pure Python (the command says why).
uv run --frozen ehingest build-reader >/dev/null || echo "== reads run in pure Python here" >&2
if [ ! -x node_modules/.bin/azurite-blob ]; then
  echo "== installing Azurite (npm ci)" >&2
  npm ci --no-audit --no-fund --silent >&2
fi
export SPARK_LOCAL_IP=127.0.0.1
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"
export DAGSTER_DISABLE_TELEMETRY=1
