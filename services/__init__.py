"""zbus: a ZeroMQ messaging backbone (catalog, event bus, job broker, Spark workers)."""

__version__ = "0.1.0"
