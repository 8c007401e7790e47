"""The runtime every zbus service shares: the service base, its admin API, catalog
registration and log shipping. It sits above the clients (it registers through the
catalog's node library and ships logs through the event bus client) and below the
servers."""
