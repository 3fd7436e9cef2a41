"""What a release promises of the installed wheel: one version everywhere, the smoke test that
scripts/check-debian11.sh runs on an old distribution, and annotations a type checker uses."""

import re
import subprocess
import sys
import sysconfig
from importlib import metadata, resources
from pathlib import Path

import pytest

import kstate

ROOT = Path(__file__).resolve().parents[2]


def cargo_version() -> str:
    workspace = (ROOT / "Cargo.toml").read_text()
    package = workspace[workspace.index("[workspace.package]") :]
    return re.search(r'^version = "([^"]+)"', package, re.MULTILINE).group(1)


def test_the_version_is_cargo_toml_s_everywhere():
    version = cargo_version()
    assert kstate.__version__ == version == metadata.version("kstate")
    script = Path(sysconfig.get_path("scripts")) / "kstate"
    shown = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True).stdout
    assert shown == f"kstate {version}\n"
    assert f"## {version} " in (ROOT / "CHANGELOG.md").read_text(), "the CHANGELOG has no entry for this version"


def test_the_smoke_test_passes(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "smoke_test.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and done.stdout.endswith("smoke test passed\n")


def test_the_wheel_ships_its_annotations():
    package = resources.files("kstate")
    assert package.joinpath("py.typed").is_file()
    stubs = package.joinpath("_core.pyi").read_text()
    assert "class KeyValueStore" in stubs and "class Partition" in stubs


def test_typed_usage_passes_mypy_strict_against_the_installed_wheel(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    example = ROOT / "examples" / "typed_usage.py"
    # From an empty directory, so kstate is the installed package (python/ is not on the path).
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(example)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert "{'a': 2, 'b': 1}" in ran.stdout


def test_a_type_error_in_user_code_is_reported(tmp_path):
    """The check above can fail: mypy sees kstate's annotations, so a wrong call is an error."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    wrong = tmp_path / "wrong.py"
    wrong.write_text(
        "from kstate import TimestampedKeyValueStore\n"
        "def f(store: TimestampedKeyValueStore) -> str:\n"
        "    return store.put_if_newer('k', 1, 5)\n"
    )
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(wrong)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 1
    assert 'Incompatible return value type (got "bool", expected "str")' in checked.stdout
