#!/usr/bin/python3
"""Profile a naive RMSNorm on a simulated NeuronCore, the way a torch.profiler tutorial does.

    /usr/bin/python3 examples/python/rmsnorm_naive.py [--rows 4096 --cols 4096 --out profiles] [--with-stack]

Six eager ops (mul, mean, add, rsqrt, mul, mul): six device executables, six launches.
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
parser.add_argument("--with-stack", action="store_true",
                    help="record each op's Python call site and print the table by source line too")
args = parser.parse_args()


def rms_norm_naive(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


x = torch.randn(args.rows, args.cols, generator=torch.Generator(0), device="neuron")
w = torch.ones(args.cols, device="neuron")

cfg = NeuronConfig(profile_output_dir=f"{args.out}/naive", capture_enabled_for_nc="0")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
             schedule=schedule(wait=2, warmup=1, active=1),
             on_trace_ready=NeuronProfiler(cfg).export_trace,
             record_shapes=True,
             with_stack=args.with_stack,
             experimental_config=cfg) as prof:
    for _ in range(4):
        with record_function("rms_norm_naive"):
            y = rms_norm_naive(x, w)
        torch.neuron.synchronize()  # device work is asynchronous: wait for it inside the step
        prof.step()

print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=10))
if args.with_stack:  # which line of this file each op came from (torch's Source Location column)
    print(prof.key_averages(group_by_stack_n=1).table(sort_by="self_privateuse1_time_total", row_limit=8))
print(f"profile written to {cfg.profile_output_dir}/ (open it with: sightline serve {args.out})")
