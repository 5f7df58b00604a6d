"""The project's own AMQP 1.0 (the codec both ends share; see each module)."""
