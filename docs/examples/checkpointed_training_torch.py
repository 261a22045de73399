"""The same job in PyTorch: a small network with dropout trained by Adam, its batches and dropout masks drawn from
PyTorch's random generator, saved every CHECKPOINT_INTERVAL_S and on SIGTERM with microcosm_checkpoint.torch
(weights, optimizer moments and generator states), resumed exactly from RESUME_FROM.

    CHECKPOINT_DIR=/tmp/ckpt CHECKPOINT_INTERVAL_S=5 python checkpointed_training_torch.py --out weights.pt
"""

from __future__ import annotations

import argparse
import logging
import time

import torch

from microcosm_checkpoint import Checkpointer
from microcosm_checkpoint import torch as checkpoint_torch

SEED, SAMPLES, FEATURES, HIDDEN, BATCH = 7, 2048, 16, 32, 64


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic data from its own generator: the same in every run, whatever the global generator's state."""
    generator = torch.Generator().manual_seed(SEED)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    plane = torch.randn(FEATURES, generator=generator)
    y = (x @ plane + 0.5 * torch.randn(SAMPLES, generator=generator) > 0).float()
    return x, y


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--out", required=True, help="where to write the final state dict (.pt)")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="pretend each step takes this much longer")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one thread: the same order of floating-point sums in every run

    ck = Checkpointer.from_env(dumps=checkpoint_torch.dumps, loads=checkpoint_torch.loads)
    x, y = dataset()
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(HIDDEN, 1)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = 0
    restored = ck.restore()
    if restored:
        step, state = restored
        checkpoint_torch.load(state, model, optimizer)
    print(f"resumed from step {step}" if restored else "starting from step 0", flush=True)
    while step < args.steps:
        batch = torch.randint(0, SAMPLES, (BATCH,))  # the global generator: its state is in the checkpoint
        optimizer.zero_grad()
        loss = torch.nn.functional.binary_cross_entropy_with_logits(model(x[batch]).squeeze(1), y[batch])
        loss.backward()
        optimizer.step()
        step += 1
        time.sleep(args.step_delay_s)
        if ck.due(step):
            ck.save(step, checkpoint_torch.state(model, optimizer))
            print(f"checkpoint at step {step}", flush=True)
        if ck.stop_requested:
            print(f"stopped at step {step}", flush=True)
            return ck.exit_status
    torch.save(model.state_dict(), args.out)
    print(f"finished at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
