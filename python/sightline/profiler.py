"""sightline.profiler: torch.profiler's API over sightline's profiler (include/sightline/profiler.h).

    from sightline.profiler import profile, schedule, record_function, ProfilerActivity
    from sightline.neuron import NeuronConfig, NeuronProfiler

    cfg = NeuronConfig(profile_output_dir="profiles/naive")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=2, warmup=1, active=1),
                 on_trace_ready=NeuronProfiler(cfg).export_trace,
                 experimental_config=cfg, record_shapes=True) as prof:
        for _ in range(4):
            with record_function("model_inference"):
                y = model(x)
            sightline.neuron.synchronize()
            prof.step()
    print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=10))

The table is the C++ profiler's, byte for byte (times are modeled: the same on every run).
"""

import contextlib
import os
import socket

from . import _sightline
from ._sightline import (  # noqa: F401
    ExperimentalConfig,
    FunctionEventAvg,
    KeyAverages,
    ProfilerAction,
    ProfilerActivity,
    Schedule,
    schedule,
    rename_privateuse1_backend,
    privateuse1_backend_name,
)
from .neuron import NeuronConfig, NeuronProfiler, ProfileMode  # noqa: F401  (TorchNeuron's names)


def supported_activities():
    return {ProfilerActivity.CPU, ProfilerActivity.PrivateUse1}


class profile(_sightline._Profile):
    """torch.profiler.profile: a context manager (or start()/stop()) with torch's keyword arguments.

    on_trace_ready(prof) runs inside the step() that ends an active window, or inside stop().
    with_stack=True records the Python call site of every op and record_function (the frames
    outside the sightline package, innermost first, "file(line): function"): key_averages(
    group_by_stack_n=N) groups by them, export_stacks writes them for a flame graph, and the trace
    carries them as each op's "Call stack". with_modules and acc_events are accepted for torch's
    signature and have no effect."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, execution_trace_observer=None, acc_events=False, use_cuda=None,
                 max_events=4_000_000):
        if activities is None:
            activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
        activities = list(activities)
        for a in activities:
            if not isinstance(a, ProfilerActivity):
                raise TypeError(f"activities: expected ProfilerActivity values, got {type(a).__name__}")
        if use_cuda:
            raise ValueError("use_cuda: there is no CUDA device; use ProfilerActivity.PrivateUse1 for neuron")
        if execution_trace_observer is not None:
            raise ValueError("execution_trace_observer is not supported")
        if experimental_config is not None and not isinstance(experimental_config, ExperimentalConfig):
            raise TypeError("experimental_config must be a sightline.neuron.NeuronConfig")
        super().__init__(activities, schedule, on_trace_ready, bool(record_shapes), bool(profile_memory),
                         bool(with_flops), bool(with_stack), experimental_config, int(max_events))
        self.record_shapes = bool(record_shapes)
        self.profile_memory = bool(profile_memory)
        self.with_flops = bool(with_flops)
        self.with_stack = bool(with_stack)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.running:
            self.stop()
        return False

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0, group_by_overload_name=False):
        """torch's key_averages: rows grouped by name, and by input shapes (record_shapes=True) and the
        first group_by_stack_n frames of the call stack (with_stack=True) when asked; the table then
        has torch's Input Shapes and Source Location columns."""
        if group_by_stack_n < 0:
            raise ValueError(f"key_averages: group_by_stack_n must be >= 0, got {group_by_stack_n}")
        return super().key_averages(bool(group_by_input_shape), int(group_by_stack_n))

    def events(self):
        """The last trace's events (dicts: name, device_type, start_ns, end_ns, input_shapes, stack,
        parent)."""
        return self._events()

    def export_stacks(self, path, metric="self_cpu_time_total"):
        """torch's export_stacks: the recorded stacks in flamegraph's collapsed format, one line per
        event ("outer;...;inner value"), the value in integer nanoseconds of `metric`
        (self_cpu_time_total or self_privateuse1_time_total). Needs with_stack=True."""
        if not self.with_stack:
            raise RuntimeError("export_stacks() requires with_stack=True")
        super().export_stacks(os.fspath(path), metric)


class record_function(contextlib.ContextDecorator):
    """torch.profiler.record_function: a named user scope, as a context manager or a decorator. It is a
    row of key_averages and the correlation parent of the work launched inside it."""

    def __init__(self, name, args=None):
        self.name = str(name)
        self.args = args
        self._open = []

    def __enter__(self):
        scope = _sightline._RecordFunction(self.name)
        scope.__enter__()
        self._open.append(scope)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._open.pop().__exit__(exc_type, exc, tb)
        return False


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """torch.profiler.tensorboard_trace_handler: an on_trace_ready that writes
    <dir_name>/<worker_name>.<step>.pt.trace.json (Chrome trace, opens in Perfetto)."""
    if use_gzip:
        raise ValueError("tensorboard_trace_handler: use_gzip is not supported")

    def handler(prof):
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        prof.export_chrome_trace(os.path.join(dir_name, f"{worker}.{prof.step_num}.pt.trace.json"))

    return handler
