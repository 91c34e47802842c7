"""sightline.neuron: the simulated NeuronCore device (torch.neuron's role), and TorchNeuron's profiling
API: NeuronConfig and NeuronProfiler(cfg).export_trace as a profile's on_trace_ready.

    sightline.neuron.configure(spec="trn2", functional=True)   # optional, before the first neuron tensor
    x = sightline.randn(128, 512, device="neuron")
    sightline.neuron.synchronize()                             # device work is asynchronous

Times are modeled (docs/host-model.md); functional=False simulates timing only (same modeled times,
results are not computed).
"""

from ._sightline.neuron import (  # noqa: F401
    DeviceInfo,
    NeuronConfig,
    NeuronProfiler,
    ProfileMode,
    TraceSummary,
    configure,
    device_info,
    last_trace_summary,
    memory_allocated,
    memory_free,
    simulation_wall_ns,
)
import atexit as _atexit

from ._sightline import neuron as _neuron
from ._sightline import Device as _Device


def _drain_at_exit():
    # Device work still queued when the interpreter exits must finish first: otherwise static
    # destruction tears down the CPU thread pool that a runtime worker's simulation is still using,
    # and the process hangs in pthread_cond_destroy (observed with tensors alive at exit).
    try:
        _neuron.synchronize()
    except Exception:  # noqa: BLE001  (nothing to report to at exit)
        pass


_atexit.register(_drain_at_exit)


def synchronize(device=None):
    """Waits for every queued execution on every core (torch.neuron.synchronize()): the host clock
    moves to their modeled completion. `device` is accepted for torch's signature; all cores are waited for."""
    _neuron.synchronize()


def is_available():
    return True


def device_count():
    """Cores of the configured spec (starts the runtime: call configure() first if you need it)."""
    return device_info().cores


def current_device():
    return 0


def device(index=0):
    return _Device("neuron", index)
