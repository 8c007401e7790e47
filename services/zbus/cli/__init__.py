"""The ``zbus`` command: run the local cluster, inspect it, and work with its bus and jobs.

zbus up [--ha] [--config FILE] [--state-dir DIR]
                                            run the local cluster in the foreground
                                            (--ha: three bus replicas and etcd)
zbus down [--state-dir DIR]                 stop it
zbus status                                 one table of the cluster (exit 1: not all ready)
zbus services ls                            the services the catalog knows
zbus bus pub|sub|tail|topics                the event bus
zbus jobs submit|ls|show|cancel|retry|watch the broker's jobs
zbus queues ls|purge, zbus workers ls       the broker's queues and workers
zbus logs [-f]                              the cluster's log records
zbus keys generate NAME [--dir DIR]         write a CURVE key pair
zbus completion bash|zsh|tcsh               a shell completion script
zbus <service> [--flag value ...]           run one service (flags as ZBUS_* settings)

Errors are one line, ``zbus: <reason>``, on stderr; exit status 1 for a failure, 2 for
bad usage (``jobs submit`` keeps 2 for a connection error and 3 for no result in time).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from zbus.cli.common import CliError, Cluster
from zbus.common.settings import ConfigError
from zbus.common.version import __version__

# Services the command can run, in the order the local cluster starts them.
SERVICES = ("catalog", "eventbus", "broker", "worker", "sparkworker")
SHELLS = ("bash", "zsh", "tcsh")
# The cluster files `zbus up` runs: the plain one, and the one with a replicated bus.
CLUSTER_FILE = Path("deploy/local-cluster.toml")
HA_CLUSTER_FILE = Path("deploy/local-cluster-ha.toml")


def _available_services() -> list[str]:
    return [s for s in SERVICES if importlib.util.find_spec(f"zbus.{s}") is not None]


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"zbus: {message} (see `{self.prog} --help`)\n")


def parser() -> argparse.ArgumentParser:
    """The ``zbus`` command's argument parser (shell completion is generated from it)."""
    from zbus.cli import bus, cluster, jobs, logs, queues

    top = _Parser(
        prog="zbus",
        description="The zbus command: run the local cluster, inspect it, and work with its "
        "bus and jobs. Endpoints come from flags, ZBUS_* variables or the catalog "
        "(--catalog, ZBUS_CATALOG_URL).",
    )
    top.add_argument("--version", action="version", version=f"zbus {__version__}")
    top.add_argument(
        "--catalog",
        dest="top_catalog",
        metavar="URL",
        default=None,
        help="the catalog's admin URL for any command (`zbus --catalog URL status`); "
        "the command's own --catalog wins",
    )
    sub = top.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser("up", help="run the local cluster on 127.0.0.1 (Ctrl-C stops it)")
    up.add_argument(
        "--ha",
        action="store_true",
        help=f"the event bus as three replicas led through etcd ({HA_CLUSTER_FILE})",
    )
    up.add_argument(
        "--config",
        type=Path,
        default=None,
        help=f"the cluster file (default {CLUSTER_FILE}, or {HA_CLUSTER_FILE} with --ha)",
    )
    up.add_argument("--state-dir", type=Path, default=Path(".zbus"))

    down = sub.add_parser("down", help="stop the local cluster started by `zbus up`")
    down.add_argument("--state-dir", type=Path, default=Path(".zbus"))

    cluster.add_parsers(sub)
    bus.add_parser(sub)
    jobs.add_parser(sub)
    queues.add_parsers(sub)
    logs.add_parser(sub)

    keys = sub.add_parser("keys", help="CURVE keys")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    gen = keys_sub.add_parser("generate", help="write NAME.key and NAME.key_secret")
    gen.add_argument("name")
    gen.add_argument("--dir", type=Path, default=Path(".zbus/keys"))

    completion = sub.add_parser("completion", help="print a shell completion script")
    completion.add_argument("shell", choices=SHELLS)

    for name in _available_services():
        sub.add_parser(name, help=f"run the {name} service", add_help=False)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _available_services():
        module = importlib.import_module(f"zbus.{args_list[0]}.__main__")
        module.run(args_list[1:])
        return 0
    args = parser().parse_args(args_list)
    try:
        return _dispatch(args)
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except ConfigError as exc:
        return _fail(str(exc), 2)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``zbus bus sub | head``): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        if os.environ.get("ZBUS_DEBUG"):
            raise
        return _fail(_describe(exc), 1)


def _fail(reason: str, code: int) -> int:
    print(f"zbus: {reason}", file=sys.stderr, flush=True)
    return code


def _describe(exc: Exception) -> str:
    from zbus.errors import ZbusError

    if isinstance(exc, ZbusError | OSError | ValueError | TimeoutError):
        return str(exc) or type(exc).__name__
    name = type(exc).__name__
    if type(exc).__module__.startswith("zmq"):
        return f"ZeroMQ: {exc}"
    return f"unexpected {name}: {exc} (ZBUS_DEBUG=1 shows where)"


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "up":
        from zbus.launcher import Cluster as LocalCluster
        from zbus.launcher import load_cluster_file

        config = args.config or (HA_CLUSTER_FILE if args.ha else CLUSTER_FILE)
        loaded = load_cluster_file(config)
        print(f"starting the zbus cluster ({len(loaded.services)} services)", flush=True)
        return LocalCluster(loaded.services, args.state_dir, sys.stdout, loaded.restart).run()
    if args.command == "down":
        from zbus.launcher import stop_cluster

        return stop_cluster(args.state_dir, sys.stdout)
    if args.command == "keys":
        from zbus.common.security import generate_keys

        public, secret = generate_keys(args.dir, args.name)
        print(f"public key: {public}\nsecret key: {secret} (keep it private)")
        return 0
    if args.command == "completion":
        import shtab

        print(shtab.complete(parser(), shell=args.shell), end="")
        return 0
    cluster = Cluster(args)
    try:
        return _run(args, cluster)
    finally:
        cluster.close()


def _run(args: argparse.Namespace, cluster: Cluster) -> int:
    from zbus.cli import bus, jobs, logs, queues
    from zbus.cli import cluster as views

    if args.command == "jobs" and args.jobs_command == "watch":
        from zbus.cli.watch import watch

        return watch(args, cluster)
    commands: dict[str, Callable[[argparse.Namespace, Cluster], int]] = {
        "status": views.run_status,
        "services": views.run_services,
        "bus": bus.run,
        "jobs": jobs.run,
        "queues": queues.run_queues,
        "workers": queues.run_workers,
        "logs": logs.run,
    }
    return commands[args.command](args, cluster)


if __name__ == "__main__":
    raise SystemExit(main())
