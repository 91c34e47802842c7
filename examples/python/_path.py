"""Lets the examples run from a source checkout without installing the package: when `sightline` is
not importable, the build tree's package (build/python, or $SIGHTLINE_BUILD_DIR/python) is used."""

import importlib.util
import os
import sys

if importlib.util.find_spec("sightline") is None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    package_root = os.path.join(os.environ.get("SIGHTLINE_BUILD_DIR", os.path.join(root, "build")), "python")
    if not os.path.isdir(os.path.join(package_root, "sightline")):
        sys.exit(f"the sightline package is neither installed nor built at {package_root}: run scripts/setup.sh "
                 "(or set SIGHTLINE_BUILD_DIR to a build directory); docs/python.md says how to install it")
    sys.path.insert(0, package_root)
