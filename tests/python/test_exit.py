"""The interpreter exits cleanly with device work still queued and its tensors alive (sightline.neuron
drains the queue at exit; without it the process hung in static destruction)."""

import subprocess

from conftest import run_python

PROGRAM = """
import sightline as torch
x = torch.randn(512, 512, device="neuron")
(x @ x).cpu()
y = [x @ x for _ in range(4)]   # queued, alive at exit
"""


def test_exit_with_queued_device_work(tmp_path):
    script = tmp_path / "queued.py"
    script.write_text(PROGRAM)
    try:
        r = run_python([script], cwd=tmp_path, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the interpreter did not exit with device work queued") from None
    assert r.returncode == 0, r.stderr
