"""The catalog service: DBP registration, liveness and info requests for every zbus node."""
