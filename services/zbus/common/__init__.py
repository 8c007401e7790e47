"""Shared runtime of every zbus service: settings, service base, admin API, logging."""
