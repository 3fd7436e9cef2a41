"""A local SparkSession that stays on loopback, with Python workers on this interpreter; which
kind of session a call got (classic, or Spark Connect)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from kstate.errors import JavaNotFoundError, SparkConnectUnsupportedError


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


def is_spark_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (``SparkSession.builder.remote(...)``,
    ``spark.api.mode=connect``, Databricks serverless and shared clusters)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def refuse_spark_connect(spark: Any, what: str, instead: str) -> None:
    """Raises ``SparkConnectUnsupportedError`` if ``spark`` is a Spark Connect session: ``what``
    needs the ``SparkContext``, which Spark Connect does not have; ``instead`` says what to do."""
    if is_spark_connect(spark):
        raise SparkConnectUnsupportedError(
            f"{what} needs Spark's classic driver API (the SparkContext), which a Spark Connect session "
            f"does not have: {instead}"
        )


def default_parallelism(spark: Any) -> int:
    """Spark's default parallelism (the partition count a state gets when none is given): the
    SparkContext's, or under Spark Connect, which has none, ``spark.default.parallelism`` when
    the session sets it; else ``SparkConnectUnsupportedError`` (kstate does not guess a count
    that is then fixed for the state's lifetime)."""
    if not is_spark_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None)
    if configured is None:
        raise SparkConnectUnsupportedError(
            "a new state's partition count defaults to Spark's default parallelism, which a Spark Connect "
            "session does not expose: give num_partitions (transform_with_state, StateBackend or "
            "StateBackend.partition), or set spark.default.parallelism"
        )
    return int(configured)
