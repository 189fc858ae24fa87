"""All-reduce across every rank with init_method="env://": proves the environment --ddp-env sets.

Each rank contributes rank+1; every rank prints the sum it got, which must be W*(W+1)/2.
"""
import os
import socket

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    print(f"rank={rank} world={world} local_rank={os.environ.get('LOCAL_RANK')} "
          f"port={os.environ.get('MASTER_PORT')} "
          f"node={os.environ.get('SLURMD_NODENAME', socket.gethostname())} sum={t.item():g} "
          f"ok={t.item() == expected}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
