"""``import kstate`` loads the facade alone (every Spark Python worker and every ``kstate``
command pays for the import): the native library, importlib.metadata, the logs, the rebalance
protocol and Arrow load when a call needs them. Checked by the modules loaded, not by a clock."""

import json
import subprocess
import sys
from importlib import metadata

import pytest

HEAVY = ("kstate._core", "importlib.metadata", "pyarrow", "numpy", "pandas", "pyspark", "tempfile", "uuid")


def modules_loaded_by(code: str, tmp_path) -> list[str]:
    """The modules a fresh interpreter loads running ``code`` (from an empty directory, so
    ``kstate`` is the installed package)."""
    probe = f"import json, sys\nbefore = set(sys.modules)\n{code}\nprint(json.dumps(sorted(set(sys.modules) - before)))"
    done = subprocess.run([sys.executable, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_import_kstate_loads_only_the_facade(tmp_path):
    assert modules_loaded_by("import kstate", tmp_path) == ["kstate"]


def test_a_name_loads_what_it_needs_and_the_version_needs_no_metadata(tmp_path):
    loaded = modules_loaded_by("import kstate\nassert kstate.__version__", tmp_path)
    assert "kstate._core" in loaded and "importlib.metadata" not in loaded and "kstate.stores" not in loaded
    loaded = modules_loaded_by("from kstate import Stores", tmp_path)
    assert "kstate.stores" in loaded and "pyspark" not in loaded and "pyarrow" not in loaded


@pytest.mark.parametrize("name", ["kstate.errors", "kstate.serdes"])
def test_light_modules_stay_light(tmp_path, name):
    loaded = modules_loaded_by(f"import {name}", tmp_path)
    assert not [m for m in loaded if m.startswith(HEAVY)], loaded


def test_every_public_name_resolves():
    import kstate

    assert set(kstate.__all__) <= set(dir(kstate))
    for name in kstate.__all__:
        assert getattr(kstate, name) is not None, name
    assert kstate.__version__ == metadata.version("kstate")
    assert kstate.Stores is __import__("kstate.stores", fromlist=["Stores"]).Stores
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kstate.nope  # noqa: B018
