"""The local cluster: every zbus service as a plain process on 127.0.0.1, no container engine.

``zbus up`` reads the cluster file (``deploy/local-cluster.toml``), starts each service in
order, waits until its ``/readyz`` answers 200, prints the admin URLs and then stays in
the foreground as the services' supervisor: a service that exits without being asked to
(a crash, a signal, even status 0) is started again after a back-off, and one that fails
its start five times in a row is given up while the rest go on
(:mod:`zbus.launcher.policy`). Ctrl-C, SIGTERM or ``zbus down`` stops the services in
reverse order, each with SIGTERM and its graceful deadline, SIGKILL only past it, and
the launcher exits 0.

Before it starts anything, the launcher makes sure every admin port is free, and it
counts a service ready only when the process answering at its admin port is the one it
started (the pid in ``/api/v1/info``): a port held by another cluster, from another
checkout or left by a launcher that died, is refused at once with what holds it.

A service of the cluster file may also be another program, given by its command
(``command = ["etcd", ...]``): ``zbus up --ha`` (``deploy/local-cluster-ha.toml``) runs
etcd so, first, and the event bus as three replicas that elect their leader through it.
A program is ready when its ``ready_path`` answers 200 and the process listening on its
admin port is the one started; a missing program is named, with how to install it,
before anything starts.

Services do not outlive their launcher, even one killed with ``kill -9``: each gets the
read end of a pipe whose write end only the launcher holds (``ZBUS_LIFELINE_FD``; at its
end of file the service shuts down gracefully), and on Linux also a parent-death signal
(SIGTERM), which stops a service still starting, before it watches the pipe.

The parts: :mod:`~zbus.launcher.config` (the cluster file), :mod:`~zbus.launcher.policy`
(restart decisions, no I/O), :mod:`~zbus.launcher.supervisor` (the processes),
:mod:`~zbus.launcher.state` (the state file, ``zbus down``) and
:mod:`~zbus.launcher.procs` (processes, ports and admin APIs as the OS shows them).
"""

from __future__ import annotations

from zbus.launcher.config import ClusterFile, ServiceSpec, load_cluster, load_cluster_file
from zbus.launcher.policy import RestartPolicy
from zbus.launcher.procs import pid_alive
from zbus.launcher.state import read_pidfile, stop_cluster
from zbus.launcher.supervisor import Cluster

__all__ = [
    "Cluster",
    "ClusterFile",
    "RestartPolicy",
    "ServiceSpec",
    "load_cluster",
    "load_cluster_file",
    "pid_alive",
    "read_pidfile",
    "stop_cluster",
]
