"""``python -m dagster_eventhub_ingest.emulator serve ...``: the same commands as ``ehingest
emulator``."""

from dagster_eventhub_ingest.emulator.cli import main

if __name__ == "__main__":
    main()
