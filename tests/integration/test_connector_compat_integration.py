"""azure-event-hubs-spark's documented PySpark batch code, and Kafka habits, on the emulator.

The blocks marked "as documented" are copied from the connector's
docs/PySpark/structured-streaming-pyspark.md (2.3.22) without change; only the session set-up
around them (``spark``, ``sc``, the emulator's connection string) is ours.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dagster_eventhub_ingest.resources.eventhubs_source.compat.encryption import (
    encrypt_connection_string,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]

MakeHub = Callable[..., Any]


def seqs(df: DataFrame) -> list[tuple[str, int]]:
    return sorted((r.partition, r.sequenceNumber) for r in df.collect())


def test_documented_batch_examples_run_unchanged(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=3)
    hub.send("0", [f"before-{i}".encode() for i in range(5)])
    hub.send("2", [f"p2-{i}".encode() for i in range(160)])
    time.sleep(0.05)

    # ---- session set-up (ours): a Spark 4 session, and the hub's connection string as the
    # portal gives it, the hub named by EntityPath only.
    sc = spark.sparkContext
    assert sc is not None
    connection_string = f"{hub.connection_string};EntityPath={hub.name}"

    # ---- as documented: "Event Hubs Configuration" (the plain-string line the docs give for
    # versions before 2.3.15; the encrypt line needs the connector's jar, see the next test).
    connectionString = connection_string
    ehConf = {}
    ehConf["eventhubs.connectionString"] = connectionString

    # ---- as documented: "Creating an Event Hubs Source for Batch Queries".
    df = spark.read.format("eventhubs").options(**ehConf).load()
    df = df.withColumn("body", df["body"].cast("string"))
    # Differs from the connector on purpose: its batch default starts at the end of the
    # stream (an empty result); ours reads what is retained (docs/spark_source.md).
    assert df.count() == 165
    assert sorted(r.body for r in df.where("partition = '0'").collect()) == [
        f"before-{i}" for i in range(5)
    ]

    # ---- as documented: "Event Position" (start of stream until now).
    from datetime import datetime as dt

    startOffset = "-1"
    endTime = dt.now().strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    startingEventPosition = {
        "offset": startOffset,
        "seqNo": -1,  # not in use
        "enqueuedTime": None,  # not in use
        "isInclusive": True,
    }
    endingEventPosition = {
        "offset": None,  # not in use
        "seqNo": -1,  # not in use
        "enqueuedTime": endTime,
        "isInclusive": True,
    }
    ehConf["eventhubs.startingPosition"] = json.dumps(startingEventPosition)
    ehConf["eventhubs.endingPosition"] = json.dumps(endingEventPosition)

    time.sleep(0.05)
    hub.send("0", [b"after"] * 3)  # enqueued after endTime: not read

    df = spark.read.format("eventhubs").options(**ehConf).load()
    df = df.withColumn("body", df["body"].cast("string"))
    rows = seqs(df)
    assert rows == [("0", n) for n in range(5)] + [("2", n) for n in range(160)]

    # ---- as documented: "Per Partition Configuration" (100L is Python 2; 100 here).
    ehName = hub.name
    positionKey1 = {"ehName": ehName, "partitionId": 0}
    eventPosition1 = {"offset": "@latest", "seqNo": -1, "enqueuedTime": None, "isInclusive": True}
    positionKey2 = {"ehName": ehName, "partitionId": 2}
    eventPosition2 = {"offset": None, "seqNo": 100, "enqueuedTime": None, "isInclusive": True}
    positionMap = {
        json.dumps(positionKey1): eventPosition1,
        json.dumps(positionKey2): eventPosition2,
    }
    ehConf["eventhubs.startingPositions"] = json.dumps(positionMap)
    # "Set up for ending positions follows the same set up": partition 2 ends before 150. The
    # other partitions end at the end of the stream (the time end above, before partition 0's
    # newest events, would end partition 0 before its start at @latest: the connector asserts
    # "The beginning sequence number 8 is larger than the ending sequence number 5", and so
    # does this source, test_connector_and_kafka_ranges_follow_their_own_rules).
    ehConf["eventhubs.endingPosition"] = json.dumps({"offset": "@latest", "seqNo": -1})
    ehConf["eventhubs.endingPositions"] = json.dumps(
        {json.dumps(positionKey2): {"offset": None, "seqNo": 150, "enqueuedTime": None}}
    )

    # ---- as documented: "Receiver Timeout and Operation Timeout".
    receiverTimeoutDuration = datetime.time(0, 3, 20).strftime("PT%HH%MM%SS")
    operationTimeoutDuration = datetime.time(0, 1, 0).strftime("PT%HH%MM%SS")
    ehConf["eventhubs.receiverTimeout"] = receiverTimeoutDuration
    ehConf["eventhubs.operationTimeout"] = operationTimeoutDuration

    df = spark.read.format("eventhubs").options(**ehConf).load()
    # Partition 0 starts at the end (nothing), partition 2 reads [100, 150) (end exclusive);
    # partition 1 has no events.
    assert seqs(df) == [("2", n) for n in range(100, 150)]


_ENCRYPT_JAVA = """
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import javax.crypto.Cipher;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

public class Encrypt {
    // org.apache.spark.eventhubs.EventHubsUtils.encrypt / getSecretKeySpec (connector 2.3.22)
    public static void main(String[] args) throws Exception {
        String version = "2.3.22";
        SecretKeyFactory factory = SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256");
        PBEKeySpec spec = new PBEKeySpec(version.toCharArray(), version.getBytes(), 1000, 256);
        SecretKeySpec key = new SecretKeySpec(factory.generateSecret(spec).getEncoded(), "AES");
        Cipher cipher = Cipher.getInstance("AES/ECB/PKCS5Padding");
        cipher.init(Cipher.ENCRYPT_MODE, key);
        byte[] plain = new String(System.in.readAllBytes(), StandardCharsets.UTF_8).getBytes(
            StandardCharsets.UTF_8);
        System.out.print(Base64.getEncoder().encodeToString(cipher.doFinal(plain)));
    }
}
"""


def _connector_encrypt(plain: str, tmp_path: Path) -> str:
    source = tmp_path / "Encrypt.java"
    source.write_text(_ENCRYPT_JAVA)
    # Java 11+ runs a single source file directly; the JDK that runs Spark is enough.
    done = subprocess.run(
        ["java", str(source)], input=plain.encode(), capture_output=True, timeout=120, check=True
    )
    return done.stdout.decode()


def test_connection_string_encrypted_by_the_connector_is_accepted(
    spark: SparkSession, make_eventhub: MakeHub, tmp_path: Path
) -> None:
    hub = make_eventhub(partitions=1)
    hub.send("0", [b"x"] * 4)
    plain = f"{hub.connection_string};EntityPath={hub.name}"
    # What the connector's `sc._jvm.org.apache.spark.eventhubs.EventHubsUtils.encrypt(...)`
    # returns, computed by its own steps on the JVM (the jar itself has no Spark 4 build).
    encrypted = _connector_encrypt(plain, tmp_path)
    assert encrypt_connection_string(plain) == encrypted

    ehConf = {
        "eventhubs.connectionString": encrypted,
        "eventhubs.startingPosition": json.dumps({"offset": "-1", "seqNo": -1}),
    }
    assert spark.read.format("eventhubs").options(**ehConf).load().count() == 4


def test_kafka_offsets_earliest_latest_and_exclusive_end(
    spark: SparkSession, make_eventhub: MakeHub
) -> None:
    hub = make_eventhub(partitions=2)
    hub.send("0", [b"a"] * 10)
    hub.send("1", [b"b"] * 10)
    df = (
        spark.read.format("eventhubs")
        .option("connection_string", hub.connection_string)
        .option("eventhub_name", hub.name)
        .option("startingOffsets", json.dumps({hub.name: {"0": -2, "1": 4}}))
        .option("endingOffsets", json.dumps({hub.name: {"0": 3, "1": -1}}))
        .load()
    )
    # -2 earliest; an end is exclusive (0..2); -1 latest as an end reads to the last event.
    assert seqs(df) == [("0", 0), ("0", 1), ("0", 2)] + [("1", n) for n in range(4, 10)]
