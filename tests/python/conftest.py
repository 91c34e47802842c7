"""Shared fixtures of the Python package's tests. Run by ctest (tests/python/CMakeLists.txt) with
PYTHONPATH at the build tree's package; by hand:

    PYTHONPATH=build/python /usr/bin/python3 -m pytest tests/python
"""

import os
import pathlib
import subprocess
import sys

import pytest

SOURCE_DIR = pathlib.Path(os.environ.get("SIGHTLINE_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))


@pytest.fixture(scope="session")
def source_dir():
    return SOURCE_DIR


def run_python(args, cwd, timeout=120):
    """Runs /usr/bin/python3 (this interpreter) in a fresh process, with this test's PYTHONPATH."""
    env = dict(os.environ)
    paths = env.get("PYTHONPATH", "").split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in paths if p)
    return subprocess.run([sys.executable, *[str(a) for a in args]], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
