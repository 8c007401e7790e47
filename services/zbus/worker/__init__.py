"""The worker service: an eMQP worker process with the zbus runtime (admin API, metrics,
catalog registration) that runs the jobs it is given (docs/broker.md)."""
