"""A local SparkSession that stays on loopback, with Python workers on this interpreter."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from kstate.errors import JavaNotFoundError


def configure_environment() -> None:
    """Points Spark's Python workers at this interpreter (``PYSPARK_PYTHON``, when unset) and
    keeps Spark on loopback (``SPARK_LOCAL_IP``, when unset). Call before the session starts."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def local_session(app_name: str = "kstate", master: str = "local[2]", conf: Mapping[str, Any] | None = None) -> Any:
    """``SparkSession`` on this machine: driver bound to 127.0.0.1, no UI, ``master`` threads;
    ``conf`` adds Spark configs (``{"spark.sql.shuffle.partitions": 2}``)."""
    configure_environment()
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise JavaNotFoundError(
            "Spark runs on Java and none was found: install Java 17 or 21 "
            "(apt-get install -y openjdk-17-jre-headless) or point JAVA_HOME at one."
        )
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    return builder.getOrCreate()
