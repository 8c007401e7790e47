"""The catalog server: the DBP ROUTER, UDP heartbeats, the beacon, the registry store,
log aggregation and the admin routes."""
