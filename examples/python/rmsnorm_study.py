#!/usr/bin/python3
"""The RMSNorm study (docs/tutorial.md) in Python: examples/rmsnorm's C++ program, written as a
PyTorch user writes it, with the same output tables for the same arguments.

    naive     x * rsqrt(mean(x * x, -1, keepdim) + eps) * w      six eager ops, six executables
    fused     rms_norm(x, (cols,), w, eps)                        the fused built-in: one executable
    compiled  compile(naive, backend="neuron")                    captured, fused, one executable

Each variant runs under profiler.profile with schedule(wait=2, warmup=1, active=1) (the first steps
build and load executables; the active step is what the table shows), prints the key_averages table
sorted by device time, and writes a profile output directory. A comparison from the runtime's events
closes the run.

    /usr/bin/python3 examples/python/rmsnorm_study.py --rows 1024 --cols 1024
"""

import argparse
import sys

import _path  # noqa: F401  (the build tree's package when sightline is not installed)
import sightline as torch
from sightline.neuron import NeuronConfig, NeuronProfiler
from sightline.profiler import ProfilerActivity, profile, schedule

EPS = 1e-6


def shortest(v):
    """A float as C++'s fmt "{}" prints it: the shortest text that reads back, without a trailing ".0"."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def rms_norm_naive(x, w):
    """What a PyTorch user writes: x * rsqrt(mean(x^2, -1, keepdim) + eps) * w."""
    mean_sq = (x * x).mean(-1, keepdim=True)
    return x * torch.rsqrt(mean_sq + EPS) * w


def profile_variant(name, fn, x, w, out_dir, row_limit, profile_memory):
    cfg = NeuronConfig(profile_output_dir=f"{out_dir}/{name}", capture_enabled_for_nc="0")
    exporter = NeuronProfiler(cfg)
    written = []
    active_host_ms = 0.0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=2, warmup=1, active=1),
                 on_trace_ready=lambda prof: written.append(exporter.export_trace(prof)),
                 record_shapes=True, profile_memory=profile_memory, experimental_config=cfg) as prof:
        for step in range(4):
            t0 = torch.host_clock.now_ns()
            y = fn(x, w)
            torch.neuron.synchronize()
            if step == 3:
                active_host_ms = (torch.host_clock.now_ns() - t0) / 1e6
            prof.step()
            del y  # released after the step, as the C++ study's loop-scoped result is
    print(f"\n== {name} ==")
    print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=row_limit), end="")
    return torch.neuron.last_trace_summary(), active_host_ms, written[-1]


def main(argv=None):
    parser = argparse.ArgumentParser(description="The RMSNorm study: naive eager ops, the fused built-in rms_norm "
                                     "and compile(naive), profiled on a simulated NeuronCore")
    parser.add_argument("--rows", type=int, default=4096, help="rows of the input")
    parser.add_argument("--cols", type=int, default=4096, help="columns of the input (the normalized dim)")
    parser.add_argument("--dtype", default="f32", help="f32, bf16 or f16")
    parser.add_argument("--spec", default="trn2", help="device spec: trn2, trn1 or a spec JSON file")
    parser.add_argument("--out", default="profiles", help="directory that receives one profile directory per variant")
    parser.add_argument("--row-limit", type=int, default=12, help="rows of each key_averages table")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs' generator")
    parser.add_argument("--profile-memory", action="store_true",
                        help="record allocations and releases: CPU Mem / NEURON Mem columns")
    parser.add_argument("--timing-only", action="store_true",
                        help="simulate timing only: the same modeled times, results are not computed (much faster)")
    parser.add_argument("--host-clock", choices=["modeled", "measured"], default="modeled",
                        help="modeled (host costs from the spec: the same numbers on every machine) or measured")
    args = parser.parse_args(argv)

    try:
        torch.neuron.configure(spec=args.spec, functional=not args.timing_only)
        torch.host_clock.set_mode(args.host_clock)
        wall_start = torch.host_clock.wall_now_ns()
        dtype = torch.dtype_parse(args.dtype)
        g = torch.Generator(args.seed)
        x = torch.randn(args.rows, args.cols, dtype=dtype, generator=g).to("neuron")
        w = torch.rand(args.cols, dtype=dtype, generator=g).to("neuron")
        info = torch.neuron.device_info()
        print(f"RMSNorm on {dtype.name}[{args.rows}, {args.cols}] on {x.device} ({info.spec_name}, "
              f"{info.core_version}); profiles go to {args.out}/")

        # The compiled variant is the naive function itself: compile() captures it on the first call,
        # recognizes the RMSNorm pattern and lowers it to one device executable.
        compiled = torch.compile(rms_norm_naive, backend="neuron")
        variants = [("naive", rms_norm_naive),
                    ("fused", lambda a, b: torch.rms_norm(a, (args.cols,), b, eps=EPS)),
                    ("compiled", compiled)]
        costs = [profile_variant(name, fn, x, w, args.out, args.row_limit, args.profile_memory)
                 for name, fn in variants]

        nbytes = args.rows * args.cols * 2 * dtype.itemsize
        floor_us = nbytes / info.hbm_bytes_per_ns / 1e3
        print("\n== comparison (the active step of each profile) ==")
        print(f"  {'variant':<8} {'executions':>10} {'copies':>9} {'device busy us':>14} {'device span us':>14} "
              f"{'switch+load us':>13} {'HBM MB':>9} {'host ms*':>12}")
        for (name, _), (s, host_ms, _) in zip(variants, costs):
            print(f"  {name:<8} {s.executions:>10} {s.copies_in:>9} {s.busy_us:>14.1f} {s.span_us:>14.1f} "
                  f"{s.overhead_us:>13.1f} {s.hbm_mb:>9.1f} {host_ms:>12.2f}")
        naive_s, fused_s, compiled_s = (c[0] for c in costs)
        print(f"  * the active step on the {args.host_clock} host clock, synchronize() included")
        print(f"  HBM floor of one RMSNorm (input + output bytes / {shortest(info.hbm_bytes_per_ns)} B/ns): {floor_us:.1f} us; "
              f"fused busy = {fused_s.busy_us / floor_us:.2f}x the floor")
        print(f"  naive / fused device span: {naive_s.span_us / fused_s.span_us:.2f}x; "
              f"compiled / fused device busy: {compiled_s.busy_us / fused_s.busy_us:.3f}x")
        if args.timing_only:
            print("  results not computed (--timing-only): modeled times are the same as a functional run")
        else:
            reference = torch.rms_norm(x, (args.cols,), w, eps=EPS).float()
            naive_diff = (rms_norm_naive(x, w).float() - reference).abs().amax().item()
            compiled_diff = (compiled(x, w).float() - reference).abs().amax().item()
            print(f"  max |naive - fused| = {naive_diff:.3g}; max |compiled - fused| = {compiled_diff:.3g}")
        simulated = ", ".join(f"{name} {c[0].simulation_ms / 1e3:.2f} s" for (name, _), c in zip(variants, costs))
        print(f"\nMeasured, not modeled: simulated in {torch.neuron.simulation_wall_ns() / 1e9:.2f} s of wall time "
              f"({simulated}); the whole run took {(torch.host_clock.wall_now_ns() - wall_start) / 1e9:.2f} s.")
        print("\nProfiles written:")
        for c in costs:
            print(f"  {c[2]}")
        print("Open trace.json of a profile in https://ui.perfetto.dev (Open trace file) to follow the lanes.")
        return 0
    except torch.Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
