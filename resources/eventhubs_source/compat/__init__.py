"""azure-event-hubs-spark's and Kafka's reader options on the ``eventhubs`` source.

The connector has no Spark 4 build; its reader code (``spark.read.format("eventhubs")
.options(**ehConf)``) and Kafka's ``startingOffsets`` / ``endingOffsets`` / ``failOnDataLoss``
run unchanged on this source:

* :mod:`.table`: every connector and Kafka option, and what it becomes here;
* :mod:`.options`: :func:`~.options.parse_source_options`, the options of all three dialects as
  one :class:`~.options.SourceOptions` (no I/O);
* :mod:`.bounds`: the connector's ``EventPosition`` JSON and Kafka's offsets as one
  :class:`~.bounds.Bound`;
* :mod:`.encryption`: the connector's ``EventHubsUtils.encrypt``'d connection strings;
* :mod:`.resolve`: the positions resolved on the driver to sequence numbers.

Each module is imported where it is needed; this package's face holds no names.
"""
