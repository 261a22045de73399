"""A complete torch.distributed program for a Microcosm multi-replica job: the processes of every replica form
one group from the environment Microcosm gives their pods and sum a tensor across it.

Run as the container's command it is one process per pod (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK as Microcosm
sets them); under torchrun, one process per GPU (torchrun sets RANK, WORLD_SIZE and LOCAL_RANK for each).
"""

import os

import torch
import torch.distributed as dist


def main() -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    # env:// reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK.
    dist.init_process_group(backend, init_method="env://")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)  # the sum over every process: 1 + 2 + ... + world_size
    print(f"rank {rank} of {world_size}: all-reduce sum {value.item():g}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
