"""Every script in scripts/ answers --help without PyTorch and without writing anything: run each
one in an empty folder with `torch` and `transformers` made unimportable (stub packages that raise
ImportError, first on the path)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.py"))


@pytest.fixture(scope="module")
def no_torch_path(tmp_path_factory):
    root = tmp_path_factory.mktemp("no_torch")
    for name in ("torch", "transformers"):
        (root / name).mkdir()
        (root / name / "__init__.py").write_text(f"raise ImportError('{name} is hidden by this test')\n")
    return str(root)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_works_without_torch(script, no_torch_path, tmp_path):
    p = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": no_torch_path, "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert list(tmp_path.iterdir()) == [], "--help wrote files"  # not taken for an output path
    missing = [m for m in ("h5py", "matplotlib") if f"No module named '{m}'" in p.stderr]
    if missing:
        pytest.skip(f"{script.name} needs {missing[0]}, which this environment lacks")
    assert p.returncode == 0, p.stderr[-2000:]
    assert len(p.stdout.strip()) > 40, p.stdout
