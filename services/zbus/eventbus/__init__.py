"""The event bus: durable log, sequencing, and the Event BUS / zbus wire front doors."""
