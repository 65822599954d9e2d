"""mqtt-tls-testbed: what TLS costs an MQTT IoT sensor link, measured."""

__version__ = "0.1.0"
