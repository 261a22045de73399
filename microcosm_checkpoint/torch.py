"""PyTorch helpers: a model's and an optimizer's state and the random number generators' states in one checkpoint.

Optional: PyTorch is imported when a helper is called, so the rest of the library stays standard library only.
A resume is exact only when everything that decides the next step comes back: the weights, the optimizer's
moments, and the generators that shuffle batches and draw dropout masks. Use them with a checkpointer::

    ck = Checkpointer.from_env(dumps=checkpoint_torch.dumps, loads=checkpoint_torch.loads)
    restored = ck.restore()
    if restored:
        step, state = restored
        checkpoint_torch.load(state, model, optimizer)
    ...
    ck.save(step, checkpoint_torch.state(model, optimizer))

Tensors are saved with ``torch.save`` and read back with ``torch.load(weights_only=True)``, which refuses
anything but tensors and plain containers, so a checkpoint file cannot run code when it is loaded.
"""

from __future__ import annotations

import io
import random
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, **extra: Any) -> dict[str, Any]:
    """Everything a resume needs: the model's and optimizer's state dicts, the CPU, CUDA and Python random
    generators' states, and ``extra`` (plain values: tensors, numbers, strings, lists, dicts)."""
    import torch

    generators: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        generators["cuda"] = torch.cuda.get_rng_state_all()
    return {
        "model": model.state_dict(),
        "optimizer": None if optimizer is None else optimizer.state_dict(),
        "rng": generators,
        "extra": extra,
    }


def load(saved: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> Any:
    """Put a :func:`state` back into ``model``, ``optimizer`` and the random generators; returns its ``extra``."""
    import torch

    model.load_state_dict(saved["model"])
    if optimizer is not None and saved["optimizer"] is not None:
        optimizer.load_state_dict(saved["optimizer"])
    generators = saved["rng"]
    random.setstate(generators["python"])
    torch.set_rng_state(generators["torch"])
    if "cuda" in generators and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(generators["cuda"])
    return saved["extra"]


def dumps(saved: Any) -> bytes:
    """A checkpoint's bytes, written by ``torch.save``."""
    import torch

    buffer = io.BytesIO()
    torch.save(saved, buffer)
    return buffer.getvalue()


def loads(payload: bytes) -> Any:
    """A checkpoint read back onto the CPU (``load_state_dict`` moves it to the model's device)."""
    import torch

    return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
