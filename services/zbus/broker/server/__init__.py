"""The broker server: the routing thread, the durable job store and the admin routes."""
