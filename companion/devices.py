"""Where a run computes: device names (``auto``, ``cpu``, ``cuda[:N]``, ``mps``) and ``torchrun`` process groups.

* :func:`resolve_device` turns a device name into a :class:`torch.device`, with a clear error when the
  backend is missing;
* :func:`setup_distributed` / :func:`cleanup_distributed` join and leave the process group that
  ``torchrun --nproc_per_node N`` describes in the environment; :func:`process_rank` tells a process its place;
* :func:`keep_freed_memory` keeps the memory a CPU run frees for its next step instead of returning it to the
  system (glibc's malloc thresholds; see ``companion._allocator``): the same numbers, faster steps.

Used by :class:`companion.train.Trainer` and by the runs of :mod:`companion.runs`.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ._allocator import can_keep_freed_memory, keep_freed_memory
from .errors import ConfigError, DeviceUnavailableError

__all__ = [
    "resolve_device",
    "mps_available",
    "setup_distributed",
    "cleanup_distributed",
    "process_rank",
    "keep_freed_memory",
    "can_keep_freed_memory",
]


def mps_available() -> bool:
    """Whether Apple's Metal (MPS) backend can be used by this PyTorch build on this machine."""
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(device: str | torch.device = "auto", local_rank: int | None = None) -> torch.device:
    """Turn ``"auto" | "cpu" | "cuda" | "cuda:N" | "mps"`` into a :class:`torch.device`.

    ``"auto"`` picks CUDA, then Apple's MPS, then the CPU. Asking for a backend that is not available raises
    a :class:`~companion.errors.DeviceUnavailableError` (a RuntimeError) that says what was found; a name
    that is no device raises a :class:`~companion.errors.ConfigError` (a ValueError). Under ``torchrun``
    (``local_rank`` given) a bare ``"cuda"`` means ``cuda:<local_rank>``.
    """
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'auto', 'cpu', 'cuda' or 'mps', got {device!r}")
    name = device.strip().lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if mps_available() else "cpu"
    try:
        resolved = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}") from err
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            build = "this PyTorch build has no CUDA support" if torch.version.cuda is None else "no GPU is visible"
            raise DeviceUnavailableError(
                f"device {device!r} was requested, but CUDA is not available ({build}; torch "
                f"{torch.__version__}). Use --device cpu (or auto), or install a CUDA build of PyTorch on a "
                "machine with an NVIDIA GPU."
            )
        index = resolved.index if resolved.index is not None else (local_rank or 0)
        if index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"device cuda:{index} was requested, but only {torch.cuda.device_count()} GPU(s) are visible"
            )
        resolved = torch.device("cuda", index)
    elif resolved.type == "mps" and not mps_available():
        raise DeviceUnavailableError(f"device {device!r} was requested, but Apple's MPS backend is not available here")
    elif resolved.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', got {device!r}")
    return resolved


def setup_distributed(device: str = "auto") -> tuple[int, int, int]:
    """Join the process group that ``torchrun`` describes in the environment; returns ``(rank, world, local)``.

    Without ``torchrun`` (no ``WORLD_SIZE`` > 1 in the environment) this does nothing and returns
    ``(0, 1, 0)``. The backend is NCCL when the processes train on CUDA, gloo otherwise.
    """
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return 0, 1, 0
    if not dist.is_available():
        raise RuntimeError("WORLD_SIZE > 1 but this PyTorch build has no torch.distributed support")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    target = resolve_device(device, local_rank)
    if target.type == "cuda":
        torch.cuda.set_device(target)
        dist.init_process_group("nccl", device_id=target)
    else:
        dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size(), local_rank


def cleanup_distributed() -> None:
    """Leave the process group if one was joined (safe to call always)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def process_rank() -> tuple[int, int]:
    """``(rank, world_size)`` of this process: ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
