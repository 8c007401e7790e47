"""Replication of a service's log across a group of replicas coordinated by etcd."""
