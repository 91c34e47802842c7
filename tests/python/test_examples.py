"""examples/python: the scripts run, print the torch-style tables and write profile directories; the
Python study prints what the C++ study (examples/rmsnorm) prints for the same arguments."""

import json
import os
import re
import subprocess

import pytest

from conftest import run_python

SMALL = ["--rows", "256", "--cols", "384"]


def study_lines(text, out):
    """The study's output without what is measured (wall times) and with the output path neutral."""
    return [line.replace(str(out), "OUT") for line in text.splitlines() if not line.startswith("Measured, not modeled")]


# What may differ between the two processes' traces: the wall-clock base, process and thread ids, and
# the ids that count on for the life of a process (correlation, runtime sequence numbers): Python frees
# an intermediate as soon as it is dead, where C++ keeps a temporary to the end of its statement, so the
# runtime numbers its calls differently. Ids are renamed in order of first appearance, so the links
# between events must still be the same; times are compared exactly, in integer nanoseconds.
ID_KEYS = {"id", "correlation", "External id", "sequence", "bind_id"}
PROCESS_KEYS = {"pid", "tid", "thread"}


def normalized_trace(path, drop=()):
    text = path.read_text()
    text = re.sub(r'"(ts|timestamp)":\s*(-?\d+)\.(\d{3})', lambda m: f'"{m.group(1)}":{m.group(2)}{m.group(3)}', text)
    trace = json.loads(text)
    time_key = "ts" if "traceEvents" in trace else "timestamp"
    events = [e for e in (trace["traceEvents"] if "traceEvents" in trace else trace["events"]) if e.get("name") not in drop]
    base = min(e[time_key] for e in events if time_key in e)
    renamed = {}

    def walk(node):
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ID_KEYS and isinstance(v, int):
                    node[k] = renamed.setdefault((k, v), sum(1 for key in renamed if key[0] == k))
                elif k in PROCESS_KEYS and isinstance(v, int) and v > 100:
                    node[k] = "OS id"
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for e in events:
        if time_key in e:
            e[time_key] -= base
        walk(e)
    return json.loads(re.sub(r"/\d+/", "/PID/", json.dumps(events, sort_keys=True)))


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
    # The profiles too: the same events, links and modeled times in trace.json and in the runtime's
    # system trace. Only where the runtime's tensor frees fall differs: Python releases an intermediate
    # when it is dead, C++ at the end of the statement (the same frees, at other points of the step).
    for name in ("naive", "fused", "compiled"):
        for trace, drop in (("trace.json", ()), ("system_trace.json", ("nrt_tensor_free",))):
            py_events = normalized_trace(tmp_path / "py" / name / trace, drop)
            cpp_events = normalized_trace(tmp_path / "cpp" / name / trace, drop)
            assert len(py_events) == len(cpp_events), (name, trace)
            for a, b in zip(py_events, cpp_events):
                assert a == b, (name, trace, a, b)
        frees = [sum(e["name"] == "nrt_tensor_free" for e in json.loads((tmp_path / side / name / "system_trace.json")
                                                                      .read_text())["events"]) for side in ("py", "cpp")]
        assert frees[0] == frees[1], (name, frees)


@pytest.mark.parametrize("script,row", [("rmsnorm_naive.py", "aten::rsqrt"), ("rmsnorm_fused.py", "aten::rms_norm"),
                                        ("rmsnorm_compiled.py", "Torch-Compiled Region")])
def test_the_tutorial_scripts(tmp_path, source_dir, script, row):
    r = run_python([source_dir / "examples/python" / script, *SMALL, "--out", tmp_path], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert row in r.stdout and "Self NEURON time total" in r.stdout
    variant = script[len("rmsnorm_"):-len(".py")]
    assert {"trace.json", "manifest.json"} <= set(os.listdir(tmp_path / variant))


def test_the_naive_script_with_stack_names_its_source_line(tmp_path, source_dir):
    script = source_dir / "examples/python/rmsnorm_naive.py"
    r = run_python([script, *SMALL, "--out", tmp_path, "--with-stack"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    line = next(n for n, text in enumerate(script.read_text().splitlines(), 1) if "return x * torch.rsqrt" in text)
    assert "Source Location" in r.stdout
    assert f"rmsnorm_naive.py({line}): rms_norm_naive" in r.stdout


def test_the_small_model(tmp_path, source_dir):
    r = run_python([source_dir / "examples/python/small_model.py", "--seq", "32", "--d-model", "64", "--hidden",
                    "128", "--out", tmp_path], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "FeedForward" in r.stdout and "aten::linear" in r.stdout and "Torch-Compiled Region" in r.stdout
    assert "max |eager - compiled| = " in r.stdout
