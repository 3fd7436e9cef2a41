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


def run_python(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``python *args`` from ``cwd`` (an empty directory, so kstate is the installed package)."""
    return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True)


def test_the_version_is_cargo_toml_s_everywhere():
    version = cargo_version()
    assert kstate.__version__ == version == metadata.version("kstate")
    script = Path(sysconfig.get_path("scripts")) / "kstate"
    shown = subprocess.run([str(script), "--version"], capture_output=True, text=True, check=True).stdout
    assert shown == f"kstate {version}\n"
    assert f"## {version} " in (ROOT / "CHANGELOG.md").read_text(), "the CHANGELOG has no entry for this version"


def test_the_smoke_test_passes(tmp_path):
    done = run_python(tmp_path, str(ROOT / "scripts" / "smoke_test.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and done.stdout.endswith("smoke test passed\n")


def test_the_wheel_ships_annotations_that_match_the_native_module(tmp_path):
    """``mypy.stubtest`` compares ``_core.pyi`` with the built module: every name, signature,
    base class and default (an allowlist names only what stubtest cannot judge, each with why)."""
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    package = resources.files("kstate")
    assert package.joinpath("py.typed").is_file() and package.joinpath("_core.pyi").is_file()
    allowlist = Path(__file__).with_name("stubtest_allowlist.txt")
    checked = run_python(tmp_path, "-m", "mypy.stubtest", "kstate._core", "--allowlist", str(allowlist))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_typed_usage_passes_mypy_strict_against_the_installed_wheel(tmp_path):
    pytest.importorskip("mypy", reason="mypy comes with the test extra")
    example = ROOT / "examples" / "typed_usage.py"
    # From an empty directory, so kstate is the installed package (python/ is not on the path).
    checked = run_python(tmp_path, "-m", "mypy", "--strict", "--no-incremental", str(example))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = run_python(tmp_path, str(example))
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
    checked = run_python(tmp_path, "-m", "mypy", "--strict", "--no-incremental", str(wrong))
    assert checked.returncode == 1
    assert 'Incompatible return value type (got "bool", expected "str")' in checked.stdout
