"""The PEP 517 build backend of the ``linkem`` Python package, standard library only.

Why not setuptools or flit_core: pip builds in an isolated environment and
fetches the backend named in ``requires`` from an index first, so with either
``pip install ./python`` fails on a machine without network. This backend
lives in the tree (``backend-path``) and needs nothing.

It builds a pure wheel (``py3-none-any``) holding the files of ``linkem/``
and the ``.dist-info`` (METADATA, WHEEL, RECORD with each file's SHA-256 as
PEP 376/427 define it), an editable wheel (PEP 660: a ``.pth`` naming this
directory) and an sdist (``.tar.gz`` of the sources with ``PKG-INFO``).
Metadata comes from ``[project]`` in ``pyproject.toml``.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "linkem"
TAG = "py3-none-any"
# Fixed timestamps make the archives of one tree identical from build to build.
ZIP_TIME = (2026, 1, 1, 0, 0, 0)


def _project() -> Dict[str, str]:
    """The string keys of ``[project]`` (``tomllib`` on 3.11+; before, the
    ``key = "value"`` lines, which is all this file's table holds)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:
        table: Dict[str, str] = {}
        section = None
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("["):
                section = line
            elif section == "[project]":
                m = re.fullmatch(r'([A-Za-z0-9_-]+)\s*=\s*"([^"]*)"', line)
                if m:
                    table[m.group(1)] = m.group(2)
        return table
    project = tomllib.loads(text)["project"]
    return {k: v for k, v in project.items() if isinstance(v, str)}


def _metadata() -> str:
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if "description" in p:
        lines.append(f"Summary: {p['description']}")
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    if "license" in p:
        lines.append(f"License: {p['license']}")
    return "\n".join(lines) + "\n"


def _dist_name() -> Tuple[str, str]:
    p = _project()
    return re.sub(r"[-_.]+", "_", p["name"]).lower(), p["version"]


def _sources() -> List[Path]:
    """The package's files, relative to ROOT (no caches or editor files)."""
    out = []
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
            out.append(path.relative_to(ROOT))
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    name, version = _dist_name()
    dist_info = f"{name}-{version}.dist-info"
    wheel_meta = f"Wheel-Version: 1.0\nGenerator: linkem_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"
    files = files + [
        (f"{dist_info}/METADATA", _metadata().encode()),
        (f"{dist_info}/WHEEL", wheel_meta.encode()),
    ]
    record = [_record_line(n, d) for n, d in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{name}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in files:
            info = zipfile.ZipInfo(n, ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return filename


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """PEP 517: the package's files in a pure wheel; returns its file name."""
    files = [(p.as_posix(), (ROOT / p).read_bytes()) for p in _sources()]
    return _write_wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose ``.pth`` puts this directory on ``sys.path``."""
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", f"{ROOT}\n".encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """PEP 517: the sources and ``PKG-INFO`` in ``NAME-VERSION.tar.gz``."""
    name, version = _dist_name()
    base = f"{name}-{version}"
    filename = f"{base}.tar.gz"
    members = [Path("pyproject.toml"), Path("build_backend/linkem_build.py")] + _sources()
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in members + [Path("PKG-INFO")]:
            data = _metadata().encode() if rel.name == "PKG-INFO" else (ROOT / rel).read_bytes()
            info = tarfile.TarInfo(f"{base}/{rel.as_posix()}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []
