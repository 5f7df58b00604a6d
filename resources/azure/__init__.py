"""Adapters of the Azure SDKs: credentials, and the Event Hubs client's AMQP transport.

Each module is imported where it is needed (the SDKs are heavy to import); this package's face
holds no names.
"""
