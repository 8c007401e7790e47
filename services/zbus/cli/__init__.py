"""The ``zbus`` command: run the local cluster or one service, and manage keys.

zbus up [--config FILE] [--state-dir DIR]   run the local cluster in the foreground
zbus down [--state-dir DIR]                 stop it
zbus keys generate NAME [--dir DIR]         write a CURVE key pair
zbus jobs submit QUEUE NAME [-p K=V ...]    submit a job, print its result
zbus <service> [--flag value ...]           run one service (flags as ZBUS_* settings)
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from zbus.common.settings import ConfigError

# Services the command can run, in the order the local cluster starts them.
SERVICES = ("catalog", "eventbus", "broker", "worker", "sparkworker")


def _available_services() -> list[str]:
    return [s for s in SERVICES if importlib.util.find_spec(f"zbus.{s}") is not None]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zbus", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser("up", help="run the local cluster on 127.0.0.1 (Ctrl-C stops it)")
    up.add_argument("--config", type=Path, default=Path("deploy/local-cluster.toml"))
    up.add_argument("--state-dir", type=Path, default=Path(".zbus"))

    down = sub.add_parser("down", help="stop the local cluster started by `zbus up`")
    down.add_argument("--state-dir", type=Path, default=Path(".zbus"))

    keys = sub.add_parser("keys", help="CURVE keys")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    gen = keys_sub.add_parser("generate", help="write NAME.key and NAME.key_secret")
    gen.add_argument("name")
    gen.add_argument("--dir", type=Path, default=Path(".zbus/keys"))

    from zbus.cli.jobs import add_parser as add_jobs

    add_jobs(sub)

    for name in _available_services():
        sub.add_parser(name, help=f"run the {name} service", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _available_services():
        module = importlib.import_module(f"zbus.{args_list[0]}.__main__")
        module.run(args_list[1:])
        return 0
    args = _parser().parse_args(args_list)
    try:
        return _dispatch(args)
    except ConfigError as exc:
        print(f"zbus: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "up":
        from zbus.launcher import Cluster, load_cluster

        specs = load_cluster(args.config)
        print(f"starting the zbus cluster ({len(specs)} services)", flush=True)
        return Cluster(specs, args.state_dir, sys.stdout).run()
    if args.command == "down":
        from zbus.launcher import stop_cluster

        return stop_cluster(args.state_dir, sys.stdout)
    if args.command == "keys":
        from zbus.common.security import generate_keys

        public, secret = generate_keys(args.dir, args.name)
        print(f"public key: {public}\nsecret key: {secret} (keep it private)")
        return 0
    if args.command == "jobs":
        from zbus.cli.jobs import run as run_jobs

        return run_jobs(args)
    raise AssertionError(args.command)


if __name__ == "__main__":
    raise SystemExit(main())
