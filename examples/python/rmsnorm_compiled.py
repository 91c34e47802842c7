#!/usr/bin/python3
"""Profile torch.compile(naive RMSNorm, backend="neuron") on a simulated NeuronCore.

    /usr/bin/python3 examples/python/rmsnorm_compiled.py [--rows 4096 --cols 4096 --out profiles]

compile() captures the six ops of the Python function, recognizes RMSNorm and lowers it to one
executable: one "Torch-Compiled Region" row carries the execution's device time.
"""
import argparse

import _path  # noqa: F401  (the build tree's package when sightline is not installed)
import sightline as torch
from sightline.neuron import NeuronConfig, NeuronProfiler
from sightline.profiler import ProfilerActivity, profile, record_function, schedule

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rows", type=int, default=4096)
parser.add_argument("--cols", type=int, default=4096)
parser.add_argument("--out", default="profiles")
args = parser.parse_args()


@torch.compile(backend="neuron")
def rms_norm_compiled(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


x = torch.randn(args.rows, args.cols, generator=torch.Generator(0), device="neuron")
w = torch.ones(args.cols, device="neuron")

cfg = NeuronConfig(profile_output_dir=f"{args.out}/compiled", capture_enabled_for_nc="0")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
             schedule=schedule(wait=2, warmup=1, active=1),  # step 0 captures and compiles
             on_trace_ready=NeuronProfiler(cfg).export_trace,
             record_shapes=True,
             experimental_config=cfg) as prof:
    for _ in range(4):
        with record_function("rms_norm_compiled"):
            y = rms_norm_compiled(x, w)
        torch.neuron.synchronize()
        prof.step()

print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=10))
print(rms_norm_compiled.graph_dump(x, w), end="")
print(f"profile written to {cfg.profile_output_dir}/ (open it with: sightline serve {args.out})")
