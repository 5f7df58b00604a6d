"""The project's own AMQP 1.0: the codec both ends share, and the reader's partition receiver.

The reader receives with this code, not with azure-eventhub's: nothing of another library is
replaced or driven by its internals, and a user's own ``EventHubConsumerClient`` in the same
process is untouched. One concept per module:

* ``codec``: AMQP types, encoded and decoded (the emulator's too);
* ``framing``: frames and performatives with every field present (both roles);
* ``errors``: the peer's error conditions and transport failures, and which a reconnect cures;
* ``connection``: one TCP or TLS connection and its session, its receive buffer, the handshake
  (SASL ``ANONYMOUS``, ``open``, ``begin``), keep-alive frames;
* ``cbs``: authorization over ``$cbs`` with SAS tokens or Entra ID tokens, renewed in time;
* ``receiver``: the link of one partition: the start filter, credit, transfers to events.

Management calls (partition ids and properties) stay the SDK's public API
(``dagster_eventhub_ingest.resources.azure.hub_client``).
"""
