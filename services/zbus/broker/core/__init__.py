"""The broker's pure logic: jobs, their lifecycle, routing to workers, schedules and cron,
with no sockets, no SQLite and the time passed in."""
