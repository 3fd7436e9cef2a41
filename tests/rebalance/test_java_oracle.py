"""Java itself as the oracle for the string and UUID encodings: the JDK's DataOutputStream
(writeUTF = modified UTF-8, writeChars = UTF-16BE) and UUID's two longs, compared with the bytes
kstate's codec puts into AssignmentInfo and SubscriptionInfo. Skipped where no JDK is installed."""

import shutil
import subprocess
import uuid

import pytest

from kstate.rebalance import AssignmentInfo, HostInfo, SubscriptionInfo, TaskId

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (java)")

ORACLE = """
import java.io.*;
import java.util.UUID;

public class Oracle {
    static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder();
        for (byte b : bytes) out.append(String.format("%02x", b));
        return out.toString();
    }
    // Each argument: UTF-16 code units as hex, so that U+0000 and surrogates survive argv.
    public static void main(String[] args) throws IOException {
        for (String arg : args) {
            StringBuilder text = new StringBuilder();
            for (int i = 0; i < arg.length(); i += 4) text.append((char) Integer.parseInt(arg.substring(i, i + 4), 16));
            ByteArrayOutputStream utf = new ByteArrayOutputStream();
            new DataOutputStream(utf).writeUTF(text.toString());
            ByteArrayOutputStream chars = new ByteArrayOutputStream();
            DataOutputStream out = new DataOutputStream(chars);
            out.writeInt(text.length());
            out.writeChars(text.toString());
            System.out.println(hex(utf.toByteArray()) + " " + hex(chars.toByteArray()));
        }
        UUID id = UUID.fromString("00112233-4455-6677-8899-aabbccddeeff");
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        DataOutputStream out = new DataOutputStream(bytes);
        out.writeLong(id.getMostSignificantBits());
        out.writeLong(id.getLeastSignificantBits());
        System.out.println(hex(bytes.toByteArray()));
    }
}
"""

TEXTS = ["host", "", "\0", "a\0b", "é", "€uro", "😀", "x😀y\U0010ffff", "日本語"]


@pytest.fixture(scope="module")
def java_lines(tmp_path_factory):
    source = tmp_path_factory.mktemp("oracle") / "Oracle.java"
    source.write_text(ORACLE)
    args = [text.encode("utf-16-be").hex() for text in TEXTS]
    result = subprocess.run(["java", str(source), *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("\n")


@pytest.mark.parametrize("index", range(len(TEXTS)))
def test_host_names_are_java_write_utf(java_lines, index):
    java_utf, _ = java_lines[index].split()
    # v2: version, 0 active, 0 standby, 1 host: writeUTF(host), port, 0 partitions.
    encoded = AssignmentInfo(2, partitions_by_host={HostInfo(TEXTS[index], 1): set()}).encode()
    assert encoded[16:-8].hex() == java_utf
    assert AssignmentInfo.decode(encoded).partitions_by_host == {HostInfo(TEXTS[index], 1): frozenset()}


@pytest.mark.parametrize("index", [i for i, text in enumerate(TEXTS) if text])
def test_named_topologies_are_java_write_chars(java_lines, index):
    _, java_chars = java_lines[index].split()
    # v10: version, commonly, 1 active task: subtopology, partition, char count, chars; then empty rest.
    encoded = AssignmentInfo(10, 10, active_tasks=(TaskId(0, 0, TEXTS[index]),)).encode()
    assert encoded[20:-28].hex() == java_chars


def test_process_id_is_java_uuid_longs(java_lines):
    encoded = SubscriptionInfo(1, process_id=uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")).encode()
    assert encoded[4:20].hex() == java_lines[len(TEXTS)]
