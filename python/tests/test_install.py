"""``pip install ./python`` works offline: in a fresh venv, with no index to
fetch a build backend from, the package installs and imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PYTHON_DIR


def test_pip_install_works_offline(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    made = subprocess.run([sys.executable, "-m", "venv", str(venv)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if made.returncode != 0:
        pytest.fail(f"python3 -m venv failed (Debian: apt-get install python3-venv):\n"
                    f"{made.stdout}")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_INDEX_URL="http://127.0.0.1:9/",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", str(PYTHON_DIR)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert pip.returncode == 0, pip.stdout
    # Published as linkem-emu (`linkem` on PyPI is another project's), imported as linkem.
    probe = ("import linkem, linkem.client, pathlib, importlib.metadata as m; "
             "print(linkem.__version__, callable(linkem.connect), "
             "pathlib.Path(linkem.__file__).parent.parent.name, m.version('linkem-emu'))")
    # From another directory, so that the tree's own linkem/ cannot be the one imported.
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert out.returncode == 0, out.stdout
    assert out.stdout.split() == ["0.1.0", "True", "site-packages", "0.1.0"], out.stdout
    assert not list(PYTHON_DIR.glob("*.egg-info")) and not (PYTHON_DIR / "build").exists(), \
        "the build wrote into the source tree"
