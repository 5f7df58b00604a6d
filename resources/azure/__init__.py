"""Adapters of the Azure SDKs: credentials, the Event Hubs client's AMQP transport, and
:mod:`.hub_client`, the one Event Hubs management client (partition ids and properties).

Each module is imported where it is needed (the SDKs are heavy to import); this package's face
holds no names.
"""
