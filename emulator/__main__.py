"""``python -m emulator serve ...``: the same commands as ``ehingest emulator``."""

from emulator.cli import main

if __name__ == "__main__":
    main()
