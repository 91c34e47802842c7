"""examples/python: the scripts run, print the torch-style tables and write profile directories; the
Python study prints what the C++ study (examples/rmsnorm) prints for the same arguments."""

import os
import subprocess

import pytest

from conftest import run_python

SMALL = ["--rows", "256", "--cols", "384"]


def study_lines(text, out):
    """The study's output without what is measured (wall times) and with the output path neutral."""
    return [line.replace(str(out), "OUT") for line in text.splitlines() if not line.startswith("Measured, not modeled")]


def test_the_python_study_prints_the_cpp_studys_output(tmp_path, source_dir):
    r = run_python([source_dir / "examples/python/rmsnorm_study.py", *SMALL, "--out", tmp_path / "py"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "== naive ==" in r.stdout and "Torch-Compiled Region: 0/0" in r.stdout
    for name in ("naive", "fused", "compiled"):
        assert os.path.isfile(tmp_path / "py" / name / "trace.json")
    example = os.environ.get("SIGHTLINE_RMSNORM_EXAMPLE")
    if not example or not os.path.exists(example):
        pytest.skip("the C++ study (examples/rmsnorm) is not built")
    cpp = subprocess.run([example, *SMALL, "--out", str(tmp_path / "cpp")], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert cpp.returncode == 0, cpp.stderr
    assert study_lines(r.stdout, tmp_path / "py") == study_lines(cpp.stdout, tmp_path / "cpp")


@pytest.mark.parametrize("script,row", [("rmsnorm_naive.py", "aten::rsqrt"), ("rmsnorm_fused.py", "aten::rms_norm"),
                                        ("rmsnorm_compiled.py", "Torch-Compiled Region")])
def test_the_tutorial_scripts(tmp_path, source_dir, script, row):
    r = run_python([source_dir / "examples/python" / script, *SMALL, "--out", tmp_path], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert row in r.stdout and "Self NEURON time total" in r.stdout
    variant = script[len("rmsnorm_"):-len(".py")]
    assert {"trace.json", "manifest.json"} <= set(os.listdir(tmp_path / variant))


def test_the_small_model(tmp_path, source_dir):
    r = run_python([source_dir / "examples/python/small_model.py", "--seq", "32", "--d-model", "64", "--hidden",
                    "128", "--out", tmp_path], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "FeedForward" in r.stdout and "aten::linear" in r.stdout and "Torch-Compiled Region" in r.stdout
    assert "max |eager - compiled| = " in r.stdout
