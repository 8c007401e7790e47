"""The sparkworker: an eMQP worker on queue ``spark`` running pipeline jobs on a warm
SparkSession (docs/sparkworker.md)."""
