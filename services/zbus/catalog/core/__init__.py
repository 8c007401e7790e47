"""The catalog's pure logic: DBP registration, updates, info requests and liveness, with
no sockets, no SQLite and the time passed in."""
