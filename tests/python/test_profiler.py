"""The profiler from Python: torch.profiler's API, the table byte for byte the C++ one (the golden
tables of tests/neuron, written by the C++ suite), modeled-time determinism, record_function, the
exports and the errors."""

import json
import os
import subprocess

import pytest

import sightline as torch
from sightline.neuron import NeuronConfig, NeuronProfiler
from sightline.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule

from conftest import run_python

# The program of tests/neuron/modeled_time_test.cpp's GoldenTablesOfTheThreeVariants, in Python. It
# runs in a fresh process: which executables a core has loaded is part of the profile.
GOLDEN_PROGRAM = r'''
import os, sys
import sightline as torch
from sightline.neuron import NeuronConfig, NeuronProfiler
from sightline.profiler import ProfilerActivity, profile, schedule

def naive(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

g = torch.Generator(3)
x = torch.randn(256, 384, generator=g).to("neuron")
w = torch.rand(384, generator=g).to("neuron")
compiled = torch.compile(naive, backend="neuron")
variants = {"naive": naive, "fused": lambda x, w: torch.rms_norm(x, (384,), w, eps=1e-6), "compiled": compiled}
for name, fn in variants.items():
    cfg = NeuronConfig(profile_output_dir=os.path.join(sys.argv[1], name), capture_enabled_for_nc="0")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=2, warmup=1, active=1), on_trace_ready=NeuronProfiler(cfg).export_trace,
                 record_shapes=True, experimental_config=cfg) as prof:
        for _ in range(4):
            fn(x, w)
            torch.neuron.synchronize()
            prof.step()
    with open(os.path.join(sys.argv[1], name + "_table.txt"), "w") as f:
        f.write(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=12))
'''


def test_the_tables_equal_the_cpp_profilers_golden_tables(tmp_path, source_dir):
    script = tmp_path / "golden.py"
    script.write_text(GOLDEN_PROGRAM)
    r = run_python([script, tmp_path], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for name in ("naive", "fused", "compiled"):
        golden = (source_dir / "tests/neuron/data" / f"modeled_{name}_table.txt").read_text()
        assert (tmp_path / f"{name}_table.txt").read_text() == golden, name
        assert {"trace.json", "manifest.json", "system_trace.json"} <= set(os.listdir(tmp_path / name))


def naive(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def run_steps(fn, steps=4, **kwargs):
    kwargs.setdefault("schedule", schedule(wait=1, warmup=1, active=1, repeat=1))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], **kwargs) as prof:
        for _ in range(steps):
            with record_function("model_inference"):
                fn()
            torch.neuron.synchronize()
            prof.step()
    return prof


def test_modeled_time_is_deterministic():
    x, w = torch.randn(64, 128, device="neuron"), torch.ones(128, device="neuron")
    tables = [run_steps(lambda: naive(x, w)).key_averages().table(sort_by="self_privateuse1_time_total")
              for _ in range(2)]
    assert tables[0] == tables[1]
    assert "model_inference" in tables[0] and "aten::rsqrt" in tables[0] and "ProfilerStep*" in tables[0]


def test_key_averages_as_csv_and_json():
    import csv
    import io
    x, w = torch.randn(64, 128, device="neuron"), torch.ones(128, device="neuron")

    def step():
        with record_function('a,"b"'):
            naive(x, w)

    averages = run_steps(step).key_averages()
    sort_by = "self_privateuse1_time_total"
    document = json.loads(averages.to_json(sort_by=sort_by, row_limit=-1))
    rows = list(csv.DictReader(io.StringIO(averages.to_csv(sort_by=sort_by, row_limit=-1), newline="")))
    assert len(rows) == len(document["rows"]) == len(averages)
    assert document["device_name"] == averages.device_name
    for row, parsed in zip(rows, document["rows"]):
        assert row["key"] == parsed["key"]
        for column in ("count", "cpu_time_total_ns", "self_cpu_time_total_ns", "device_time_total_ns",
                       "self_device_time_total_ns", "flops"):
            assert int(row[column]) == parsed[column], column
    # The rows the table prints, in its order; the name with a comma and quotes survives CSV.
    by_key = {(r.key, r.self_device_time_total_ns, r.count) for r in averages}
    assert {(r["key"], r["self_device_time_total_ns"], r["count"]) for r in document["rows"]} == by_key
    assert 'a,"b"' in [row["key"] for row in rows]
    first = json.loads(averages.to_json(sort_by=sort_by, row_limit=1))["rows"]
    assert [r["key"] for r in first] == [document["rows"][0]["key"]]
    with pytest.raises(Exception, match="unknown sort key"):
        averages.to_csv(sort_by="no_such_key")


def test_on_trace_ready_gets_the_profile_and_exports(tmp_path):
    x = torch.randn(16, 32, device="neuron")
    seen = []
    cfg = NeuronConfig(profile_output_dir=str(tmp_path / "neuron"), modes=[torch.neuron.ProfileMode.DEVICE,
                                                                          torch.neuron.ProfileMode.RUNTIME])
    exporter = NeuronProfiler(cfg)

    def ready(prof):
        seen.append(prof)
        seen.append(exporter.export_trace(prof))
        prof.export_chrome_trace(str(tmp_path / "chrome.json"))

    prof = run_steps(lambda: x * x, on_trace_ready=ready, experimental_config=cfg, record_shapes=True)
    assert seen[0] is prof and isinstance(prof, profile)
    assert os.path.isfile(os.path.join(seen[1], "trace.json"))
    events = json.loads((tmp_path / "chrome.json").read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mul" for e in events)
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["aten::mul"].count == 1 and rows["aten::mul"].self_device_time_total > 0
    assert rows["model_inference"].is_user_annotation
    by_shape = prof.key_averages(group_by_input_shape=True)
    assert any(r.input_shapes == [[16, 32], [16, 32]] for r in by_shape if r.key == "aten::mul")
    assert "Input Shapes" in by_shape.table(sort_by="count", row_limit=5)
    assert any(e["name"] == "aten::mul" for e in prof.events())
    handler_dir = tmp_path / "tb"
    run_steps(lambda: x + 1, on_trace_ready=torch.profiler.tensorboard_trace_handler(str(handler_dir)))
    assert [p.endswith(".pt.trace.json") for p in os.listdir(handler_dir)] == [True]


def test_memory_and_flops_columns():
    x = torch.randn(64, 64, device="neuron")
    torch.neuron.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True,
                 with_flops=True) as prof:
        x @ x
        torch.neuron.synchronize()
    table = prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=5)
    assert "NEURON Mem" in table and "Total KFLOPs" in table
    row = next(r for r in prof.key_averages() if r.key == "aten::matmul")
    assert row.flops == 2 * 64 * 64 * 64 and row.device_memory_usage == 64 * 64 * 4


def test_schedules_and_start_stop_without_a_schedule():
    s = schedule(wait=2, warmup=1, active=1)
    assert [s(i) for i in range(4)] == [ProfilerAction.NONE, ProfilerAction.NONE, ProfilerAction.WARMUP,
                                        ProfilerAction.RECORD_AND_SAVE]
    x = torch.randn(8, 8)
    prof = profile(activities=[ProfilerActivity.CPU])
    prof.start()
    torch.exp(x)
    prof.stop()
    assert "aten::exp" in prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)

    calls = []

    def my_schedule(step):  # any callable step -> ProfilerAction, as torch accepts
        calls.append(step)
        return [ProfilerAction.WARMUP, ProfilerAction.RECORD_AND_SAVE][step] if step < 2 else ProfilerAction.NONE

    prof = run_steps(lambda: torch.exp(x), steps=2, schedule=my_schedule)
    assert calls and "aten::exp" in prof.key_averages().table()


def test_profiler_errors():
    with pytest.raises(torch.Error):
        profile().step()  # outside start()/stop()
    with pytest.raises(TypeError, match="ProfilerActivity"):
        profile(activities=["cpu"])
    with pytest.raises(torch.Error):
        schedule(wait=0, warmup=1, active=0)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.exp(torch.ones(2))
    with pytest.raises(torch.Error, match="sort"):
        prof.key_averages().table(sort_by="no_such_column")
    with pytest.raises(RuntimeError, match="with_stack"):
        prof.export_stacks("unused.txt")
    with pytest.raises(ValueError, match="group_by_stack_n"):
        prof.key_averages(group_by_stack_n=-1)
    with pytest.raises(ValueError, match="already open"):
        scope = torch._sightline._RecordFunction("x")
        with scope:
            scope.__enter__()


def test_an_exception_inside_the_profile_stops_it():
    with pytest.raises(KeyError):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("failing"):
                torch.exp(torch.ones(2))
                raise KeyError("inside")
    assert not prof.running
    with profile(activities=[ProfilerActivity.CPU]) as again:  # the next profile can start
        torch.exp(torch.ones(2))
    assert "failing" in prof.key_averages().table() and "aten::exp" in again.key_averages().table()


def _rms_norm_naive(x, w):
    sq = x * x  # the call site the first aten::mul must report
    return x * torch.rsqrt(sq.mean(-1, keepdim=True) + 1e-6) * w


def _line_of(fragment):
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if fragment in line:
                return number
    raise AssertionError(fragment)


def test_with_stack_records_the_python_call_site_of_each_op():
    x, w = torch.ones(4, 8), torch.ones(8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        with record_function("norm"):
            _rms_norm_naive(x, w)
    here = os.path.abspath(__file__)
    muls = [e for e in prof.events() if e["name"] == "aten::mul"]
    assert len(muls) == 3
    # Innermost first, and the first frame is the user's line, not the package's Tensor.__mul__.
    assert muls[0]["stack"][0] == f"{here}({_line_of('sq = x * x')}): _rms_norm_naive"
    assert muls[0]["stack"][1].startswith(f"{here}(") and muls[0]["stack"][1].endswith(
        "): test_with_stack_records_the_python_call_site_of_each_op")
    assert muls[1]["stack"][0] == f"{here}({_line_of('torch.rsqrt(sq.mean')}): _rms_norm_naive"
    (norm,) = [e for e in prof.events() if e["name"] == "norm"]
    assert norm["stack"][0].endswith("): test_with_stack_records_the_python_call_site_of_each_op")

    table = prof.key_averages(group_by_stack_n=1).table(sort_by="count", row_limit=-1)
    assert "Source Location" in table
    assert f"{here}({_line_of('sq = x * x')}): _rms_norm_naive"[-60:] in table
    rows = [r for r in prof.key_averages(group_by_stack_n=1) if r.key == "aten::mul"]
    assert sorted(r.count for r in rows) == [1, 2]  # `x * x` once, the return line twice
    assert all(len(r.stack) == 1 for r in rows)
    # Without grouping, the rows are those of a profile without stacks.
    assert len([r for r in prof.key_averages() if r.key == "aten::mul"]) == 1


def test_with_stack_moves_no_modeled_time():
    x, w = torch.ones(4, 8), torch.ones(8)
    tables = []
    for with_stack in (False, True):
        with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack) as prof:
            _rms_norm_naive(x, w)
        tables.append(prof.key_averages().table(sort_by="self_cpu_time_total"))
    assert tables[0] == tables[1]


def test_export_stacks_and_the_trace_carry_the_frames(tmp_path):
    x, w = torch.ones(4, 8), torch.ones(8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        _rms_norm_naive(x, w)
    prof.export_stacks(tmp_path / "stacks.txt")
    lines = (tmp_path / "stacks.txt").read_text().splitlines()
    assert lines
    for line in lines:
        frames, value = line.rsplit(" ", 1)
        assert int(value) > 0  # integer nanoseconds
        assert frames.split(";")[-1].endswith("_rms_norm_naive")  # outermost first, innermost last
        assert " " not in frames
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    with open(tmp_path / "trace.json") as f:
        events = json.load(f)["traceEvents"]
    muls = [e for e in events if e.get("name") == "aten::mul"]
    assert muls and all(e["args"]["Call stack"][0].endswith("): _rms_norm_naive") for e in muls)


@pytest.mark.skipif(not os.environ.get("SIGHTLINE_CLI"), reason="the sightline CLI is not built")
def test_sightline_table_groups_a_saved_profile_by_call_site_as_the_live_table(tmp_path):
    x, w = torch.ones(4, 8), torch.ones(8)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        _rms_norm_naive(x, w)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    r = subprocess.run([os.environ["SIGHTLINE_CLI"], "table", str(tmp_path), "--sort-by", "self_cpu_time_total",
                        "--row-limit", "-1", "--group-by-stack-n", "2"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == prof.key_averages(group_by_stack_n=2).table(sort_by="self_cpu_time_total", row_limit=-1)
    assert "Source Location" in r.stdout
