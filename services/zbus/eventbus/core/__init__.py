"""The event bus's pure logic: subscriptions, rates, heartbeats and the client's snapshot
sync, with no sockets, no SQLite and the time passed in."""
