"""The chart's Spark executor pods start Spark's executor with pyspark's spark-class
(the Spark image's entrypoint is `zbus`): run the template's command as Kubernetes would,
with the variables Spark sets on an executor container, against a driver address where
nothing listens. The executor must start and then fail to reach that driver, which shows
that the class, its classpath and its arguments are right."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import chart


def _executor_command() -> list[str]:
    docs = chart.manifests(chart.values_of("spark-k8s"))
    config = next(d for d in docs if d["metadata"]["name"] == f"{chart.RELEASE}-spark-executor")
    container = next(chart.embedded_pods(config))["spec"]["containers"][0]
    command: list[str] = container["command"]
    return command


def test_the_executor_template_starts_sparks_executor_backend(
    tmp_path: Path, refused_port: int
) -> None:
    port = refused_port  # nothing listens there: the driver is missing
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPARK_DRIVER_URL": f"spark://CoarseGrainedScheduler@127.0.0.1:{port}",
        "SPARK_EXECUTOR_ID": "1",
        "SPARK_EXECUTOR_CORES": "1",
        "SPARK_EXECUTOR_MEMORY": "256m",
        "SPARK_APPLICATION_ID": "spark-application-1",
        "SPARK_EXECUTOR_POD_IP": "127.0.0.1",
        "SPARK_EXECUTOR_POD_NAME": "zbus-exec-1",
        "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_JAVA_OPT_0": f"-Dspark.driver.port={port}",
        "SPARK_JAVA_OPT_1": "-Dspark.rpc.numRetries=1",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.run(
        _executor_command(),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "KubernetesExecutorBackend: Started daemon" in out, out
    assert "-Dspark.driver.port=" in out, out  # Spark's JVM options reached the executor
    assert f"127.0.0.1:{port}" in out, out  # it went for the driver it was given
