#!/usr/bin/python3
"""Profile the fused built-in RMSNorm (torch.rms_norm) on a simulated NeuronCore.

    /usr/bin/python3 examples/python/rmsnorm_fused.py [--rows 4096 --cols 4096 --out profiles]

One op, one executable: each input byte crosses HBM once.
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

x = torch.randn(args.rows, args.cols, generator=torch.Generator(0), device="neuron")
w = torch.ones(args.cols, device="neuron")

cfg = NeuronConfig(profile_output_dir=f"{args.out}/fused", capture_enabled_for_nc="0")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
             schedule=schedule(wait=2, warmup=1, active=1),
             on_trace_ready=NeuronProfiler(cfg).export_trace,
             record_shapes=True,
             experimental_config=cfg) as prof:
    for _ in range(4):
        with record_function("rms_norm_fused"):
            y = torch.rms_norm(x, (args.cols,), w, eps=1e-6)
        torch.neuron.synchronize()
        prof.step()

print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=10))
print(f"profile written to {cfg.profile_output_dir}/ (open it with: sightline serve {args.out})")
