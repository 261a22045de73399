"""A complete training job that survives preemption: a two-layer numpy network trained by SGD with momentum,
saved every CHECKPOINT_INTERVAL_S and on SIGTERM, resumed from RESUME_FROM, reported to Microcosm.

Run it with CHECKPOINT_DIR set (Microcosm sets it, and the rest, for a checkpointed job):

    CHECKPOINT_DIR=/tmp/ckpt CHECKPOINT_INTERVAL_S=5 python checkpointed_training.py --out weights.npz

A resume is exact, so a run stopped and resumed any number of times ends with the same weights, bit for bit, as
one that ran straight through: everything the next step depends on is in the checkpoint (the weights and the
momentum), and what is not is derived from the step (the minibatch).
"""

from __future__ import annotations

import argparse
import logging
import pickle
import time
from collections.abc import Iterator

import numpy as np

from microcosm_checkpoint import Checkpointer

SEED, SAMPLES, FEATURES, HIDDEN, BATCH = 7, 4096, 16, 32, 64
LEARNING_RATE, MOMENTUM = 0.05, 0.9


def dataset() -> tuple[np.ndarray, np.ndarray]:
    """Synthetic data, the same in every run: two classes split by a noisy plane."""
    rng = np.random.default_rng(SEED)
    x = rng.normal(size=(SAMPLES, FEATURES))
    y = (x @ rng.normal(size=FEATURES) + 0.5 * rng.normal(size=SAMPLES) > 0).astype(np.float64)
    return x, y


def initial_state() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(SEED + 1)
    weights = {
        "w1": rng.normal(scale=FEATURES**-0.5, size=(FEATURES, HIDDEN)),
        "b1": np.zeros(HIDDEN),
        "w2": rng.normal(scale=HIDDEN**-0.5, size=HIDDEN),
        "b2": np.zeros(1),
    }
    return {"weights": weights, "velocity": {name: np.zeros_like(w) for name, w in weights.items()}}


def train_step(state: dict[str, dict[str, np.ndarray]], x: np.ndarray, y: np.ndarray, step: int) -> None:
    """One SGD step on a minibatch drawn from the step number alone, so a resumed run draws the same batches."""
    batch = np.random.default_rng([SEED, step]).choice(SAMPLES, size=BATCH, replace=False)
    xb, yb, w, v = x[batch], y[batch], state["weights"], state["velocity"]
    hidden = np.maximum(xb @ w["w1"] + w["b1"], 0.0)
    predicted = 1.0 / (1.0 + np.exp(-(hidden @ w["w2"] + w["b2"])))
    error = (predicted - yb) / BATCH  # the gradient of the mean log loss at the output
    back = np.outer(error, w["w2"]) * (hidden > 0)
    gradients = {"w1": xb.T @ back, "b1": back.sum(0), "w2": hidden.T @ error, "b2": error.sum(keepdims=True)}
    for name, gradient in gradients.items():
        v[name] = MOMENTUM * v[name] - LEARNING_RATE * gradient
        w[name] = w[name] + v[name]


def slowly(payload: bytes, seconds: float) -> Iterator[bytes]:
    """The payload in ten pieces over ``seconds``: a slow volume, so the tests can kill a save midway."""
    piece = -(-len(payload) // 10)
    for start in range(0, len(payload), piece):
        yield payload[start : start + piece]
        time.sleep(seconds / 10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--out", required=True, help="where to write the final weights (.npz)")
    parser.add_argument("--step-delay-s", type=float, default=0.0, help="pretend each step takes this much longer")
    parser.add_argument("--slow-write-s", type=float, default=0.0, help="spread each save's write over this long")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")  # the library's log lines

    if args.slow_write_s:
        ck = Checkpointer.from_env(dumps=lambda state: slowly(pickle.dumps(state), args.slow_write_s))
    else:
        ck = Checkpointer.from_env()
    x, y = dataset()
    restored = ck.restore()
    step, state = restored or (0, initial_state())
    print(f"resumed from step {step}" if restored else "starting from step 0", flush=True)
    while step < args.steps:
        train_step(state, x, y, step)
        step += 1
        time.sleep(args.step_delay_s)
        if ck.due(step):
            ck.save(step, state)
            print(f"checkpoint at step {step}", flush=True)
        if ck.stop_requested:
            print(f"stopped at step {step}", flush=True)
            return ck.exit_status  # 143 after SIGTERM: stopped, not finished
    np.savez(args.out, **state["weights"])
    print(f"finished at step {step}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
