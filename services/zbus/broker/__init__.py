"""The job broker: eMQP clients and workers, durable jobs, retries, schedules, results."""
