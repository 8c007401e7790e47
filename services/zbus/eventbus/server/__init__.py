"""The event bus server: the durable log, the hot pipeline, snapshots, the archive and the
admin routes. The only part of the event bus that does I/O."""
