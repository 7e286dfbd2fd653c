"""Host memory of local training: the allocator the ranks run under, and the peak a job will need.

Eager PyTorch on CPU allocates and frees large, differently sized buffers every step. glibc's
malloc either hands them back to the kernel each time (its defaults: slow) or, told to keep them
(the former launcher setting), fragments until each rank of the `default` preset passed 10 GB on
the real shared set. jemalloc keeps both the speed and the memory bound (bench/memory_bench.py,
figures in bench/README.md), so the launcher preloads it when the machine has it.

The estimate is a fixed part per process plus activations proportional to a micro-batch's
message-passing work (tokens x neighbours x hidden x message layers). The coefficients cover the
peaks measured on the real shared set at 3,000 tokens under jemalloc (bench/README.md) with PyPI's
torch 2.13.0 (the CUDA build: importing it alone takes 0.54 GB, about 0.5 GB more per process than
the CPU-only wheel): one process 1.53 / 4.51 / 5.35 GB (small / default / proteinmpnn; estimates
2.3 / 5.0 / 6.3).
"""

from __future__ import annotations

import os
from pathlib import Path

from invfold.allocator import JEMALLOC, JEMALLOC_CONF, allocator_env  # noqa: F401 - the launcher's allocator
from invfold.components.model.config import ModelConfig

BASE_GB = 2.0
BYTES_PER_UNIT = 14.0


def activation_units(model: ModelConfig, tokens_per_batch: int) -> int:
    """Message-passing work of one micro-batch: what a rank's activation memory grows with."""
    layers = model.encoder_layers + (model.decoder_layers if model.autoregressive else 0)
    return tokens_per_batch * model.k_neighbors * model.hidden * layers * model.message_mlp_layers


def estimated_peak_gb(model: ModelConfig, tokens_per_batch: int, nproc: int) -> float:
    """Peak resident memory of all `nproc` processes together, in GiB."""
    per_process = BASE_GB + BYTES_PER_UNIT * activation_units(model, tokens_per_batch) / 2**30
    return per_process * nproc


def machine_memory_gb() -> float:
    """Physical memory, or the container's cgroup limit when that is lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limit = Path("/sys/fs/cgroup/memory.max")  # cgroup v2; "max" when unlimited
    try:
        text = limit.read_text().strip()
    except OSError:
        text = "max"
    if text.isdigit():
        total = min(total, int(text))
    return total / 2**30


def memory_warning(
    model: ModelConfig, tokens_per_batch: int, nproc: int, available_gb: float | None = None
) -> str | None:
    """What to change when the job's estimated peak exceeds the machine's memory; None when it fits."""
    available_gb = machine_memory_gb() if available_gb is None else available_gb
    need = estimated_peak_gb(model, tokens_per_batch, nproc)
    if need <= available_gb:
        return None
    per_token = BYTES_PER_UNIT * activation_units(model, 1) / 2**30
    fitting = int((available_gb / nproc - BASE_GB) / per_token) // 100 * 100
    advice = (
        f"lower --tokens-per-batch to {fitting} or less or --nproc"
        if fitting >= 500
        else f"lower --nproc (each process needs about {need / nproc:.1f} GB)"
    )
    return (
        f"this job needs about {need:.1f} GB at its peak ({nproc} process(es), --tokens-per-batch "
        f"{tokens_per_batch}), more than this machine's {available_gb:.1f} GB: {advice}"
    )
