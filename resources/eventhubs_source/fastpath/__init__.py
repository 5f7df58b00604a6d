"""The reader's native step: ``_amqp_columns.c`` and :mod:`.loader`, which finds it compiled in
the wheel or compiles it once per host. The pure-Python path reads the same rows without it.

This package's face holds no names (the wheel's build hook loads :mod:`.loader` from its file).
"""
