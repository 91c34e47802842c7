"""Lets the examples run from a source checkout without installing the package: when `sightline` is
not importable, the build tree's package (build/python, or $SIGHTLINE_BUILD_DIR/python) is used."""

import importlib.util
import os
import sys

if importlib.util.find_spec("sightline") is None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    build = os.environ.get("SIGHTLINE_BUILD_DIR", os.path.join(root, "build"))
    sys.path.insert(0, os.path.join(build, "python"))
