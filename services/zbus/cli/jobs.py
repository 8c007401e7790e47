"""``zbus jobs``: submit a job to the broker from the shell and print its result.

zbus jobs submit QUEUE NAME [-p KEY=VALUE ...] [--params JSON] [--wait SECONDS]
zbus jobs submit spark topic-stats -p since=2026-11-01 -p prefix=/sensors/

Each ``-p`` value is read as JSON when it parses (``-p limit=10`` is the number 10,
``-p tags='["a"]'`` a list) and as text otherwise. The parameters travel as the call's
keyword arguments (eMQP REQUEST, eventmq's JSON call body); the result is printed as
JSON on stdout. Against a broker that runs CURVE, ``--curve-secret-key FILE`` (this
client's secret key file) and ``--broker-public-key FILE`` (the broker's public key file)
go together. Exit status: 0 done, 1 the job failed, 2 a usage or connection error,
3 no result within ``--wait``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from zbus.broker.client import DEFAULT_ENDPOINT, BrokerClient, BrokerClientError, JobFailed
from zbus.common.security import KeyPair, client_keys


def add_parser(sub: Any) -> None:
    """Add ``jobs`` to the ``zbus`` command's subparsers."""
    jobs = sub.add_parser("jobs", help="submit jobs to the broker")
    actions = jobs.add_subparsers(dest="jobs_command", metavar="ACTION", required=True)
    submit = actions.add_parser("submit", help="submit a job and print its result")
    submit.add_argument("queue", help="the broker queue, e.g. spark")
    submit.add_argument("name", help="the job's registered name, e.g. topic-stats")
    submit.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (value read as JSON when it parses); repeatable",
    )
    submit.add_argument(
        "--params", default=None, metavar="JSON", help="parameters as a JSON object"
    )
    submit.add_argument("--broker", default=DEFAULT_ENDPOINT, help="the broker's client port")
    submit.add_argument(
        "--wait", type=float, default=600.0, help="seconds to wait for the result (0: do not)"
    )
    submit.add_argument("--retries", type=int, default=None, help="runs after a failure")
    submit.add_argument("--job-timeout", type=float, default=None, help="seconds one run may take")
    submit.add_argument(
        "--curve-secret-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="this client's CURVE secret key file (with --broker-public-key)",
    )
    submit.add_argument(
        "--broker-public-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="the broker's CURVE public key file (with --curve-secret-key)",
    )


def parse_params(pairs: list[str], params_json: str | None) -> dict[str, Any]:
    """The job's keyword arguments from ``--params`` and the ``-p`` pairs (which win).

    Raises:
        ValueError: a pair without ``=``, or ``--params`` that is not a JSON object.
    """
    params: dict[str, Any] = {}
    if params_json is not None:
        try:
            loaded = json.loads(params_json)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--params is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError("--params must be a JSON object")
        params.update(loaded)
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"-p {pair!r}: expected KEY=VALUE")
        try:
            params[key] = json.loads(text)
        except json.JSONDecodeError:
            params[key] = text
    return params


def curve_keys(
    secret_key: Path | None, broker_public_key: Path | None
) -> tuple[KeyPair, bytes] | None:
    """The client's ``curve`` argument from the two key files; None when neither is given.

    Raises:
        ValueError: only one of the two is given.
        ConfigError: a file is missing or not a ZeroMQ key file, or the client's has no
            secret key.
    """
    if secret_key is None and broker_public_key is None:
        return None
    if secret_key is None or broker_public_key is None:
        raise ValueError("--curve-secret-key and --broker-public-key go together")
    return client_keys(secret_key, broker_public_key, "--curve-secret-key")


def run(args: argparse.Namespace) -> int:
    try:
        params = parse_params(args.param, args.params)
        curve = curve_keys(args.curve_secret_key, args.broker_public_key)
    except ValueError as exc:  # ConfigError (a key file) is a ValueError too
        print(f"zbus jobs: {exc}", file=sys.stderr)
        return 2
    client = BrokerClient(args.broker, curve=curve)
    try:
        job_id = client.submit(
            args.queue,
            args.name,
            kwargs=params,
            retries=args.retries,
            timeout=args.job_timeout,
        )
        print(f"submitted {args.name} to {args.queue} as job {job_id}", file=sys.stderr)
        if args.wait <= 0:
            print(json.dumps({"job_id": job_id}))
            return 0
        result = client.result(job_id, args.wait)
    except JobFailed as exc:
        print(f"zbus jobs: {exc}", file=sys.stderr)
        return 1
    except TimeoutError as exc:
        print(f"zbus jobs: {exc}", file=sys.stderr)
        return 3
    except (BrokerClientError, ValueError) as exc:
        print(f"zbus jobs: {exc}", file=sys.stderr)
        return 2
    finally:
        client.close()
    print(json.dumps(result, indent=2, default=str))
    return 0
