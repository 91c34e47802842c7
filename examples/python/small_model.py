#!/usr/bin/python3
"""Profile a small model written in Python: two Llama-style feed-forward blocks (RMSNorm, SiLU-gated
MLP, residual) built from sightline.nn, eager and then compiled, on a simulated NeuronCore.

    /usr/bin/python3 examples/python/small_model.py [--seq 128 --d-model 256 --hidden 512 --out profiles]

Each module's forward is a record_function scope, so the table has one row per kind of module beside
the aten:: ops; the compiled forward is one executable per call.
"""
import argparse

import _path  # noqa: F401  (the build tree's package when sightline is not installed)
import sightline as torch
from sightline import nn
from sightline.neuron import NeuronConfig, NeuronProfiler
from sightline.profiler import ProfilerActivity, profile, record_function, schedule

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--seq", type=int, default=128)
parser.add_argument("--d-model", type=int, default=256)
parser.add_argument("--hidden", type=int, default=512)
parser.add_argument("--blocks", type=int, default=2)
parser.add_argument("--out", default="profiles")
args = parser.parse_args()


class FeedForward(nn.Module):
    def __init__(self, d_model, hidden, generator):
        super().__init__()
        self.norm = nn.RMSNorm(d_model, eps=1e-6)
        self.gate = nn.Linear(d_model, hidden, bias=False, generator=generator)
        self.up = nn.Linear(d_model, hidden, bias=False, generator=generator)
        self.down = nn.Linear(hidden, d_model, bias=False, generator=generator)

    def forward(self, x):
        with record_function("FeedForward"):
            h = self.norm(x)
            return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self, blocks, d_model, hidden, generator):
        super().__init__()
        self.blocks = nn.ModuleList(FeedForward(d_model, hidden, generator) for _ in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def run(name, fn, x):
    cfg = NeuronConfig(profile_output_dir=f"{args.out}/{name}", capture_enabled_for_nc="0")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=1, warmup=1, active=1),
                 on_trace_ready=NeuronProfiler(cfg).export_trace,
                 record_shapes=True, experimental_config=cfg) as prof:
        for _ in range(3):
            y = fn(x)
            torch.neuron.synchronize()
            prof.step()
    print(f"\n== {name} ==")
    print(prof.key_averages().table(sort_by="self_privateuse1_time_total", row_limit=12), end="")
    print(f"profile written to {cfg.profile_output_dir}/")
    return y


g = torch.Generator(0)
model = Model(args.blocks, args.d_model, args.hidden, g).to("neuron")
x = torch.randn(args.seq, args.d_model, generator=g, device="neuron")
eager = run("model_eager", model, x)

# compile() captures functions of tensors: the parameters are passed in, not read from the module.
params = list(model.parameters())


@torch.compile(backend="neuron")
def forward(x, *weights):
    for i in range(args.blocks):
        norm_w, gate_w, up_w, down_w = weights[4 * i:4 * i + 4]
        h = torch.rms_norm(x, (args.d_model,), norm_w, eps=1e-6)
        # up before gate: recorded in the order gate, silu, up, mul, the graph trips an assertion of
        # the compiler's fusion pass (src/compiler/fusion.cpp, "used outside its fused group").
        up = torch.linear(h, up_w)
        x = x + torch.linear(up * torch.silu(torch.linear(h, gate_w)), down_w)
    return x


compiled = run("model_compiled", lambda v: forward(v, *params), x)
print(f"\nmax |eager - compiled| = {(eager - compiled).abs().amax().item():.3g}")
