"""All-reduce across every rank with init_method="env://": proves the environment --ddp-env sets.

Each rank contributes rank+1; every rank prints the sum it got, which must be W*(W+1)/2.
Backend: nccl when CUDA is available (device cuda:LOCAL_RANK, or the only visible device when
Slurm binds one GPU per task), gloo on the CPU otherwise; --backend nccl|gloo forces one.
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist


def fail(message):
    print(f"allreduce.py: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def choose(forced):
    cuda = torch.cuda.is_available()
    if forced == "nccl":
        if not dist.is_nccl_available():
            fail("--backend nccl: this PyTorch was built without NCCL")
        if not cuda:
            fail("--backend nccl: no CUDA device is visible")
    if forced == "gloo" and not dist.is_gloo_available():
        fail("--backend gloo: this PyTorch was built without Gloo")
    backend = forced or ("nccl" if cuda and dist.is_nccl_available() else "gloo")
    if backend == "gloo":
        return backend, torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 1:
        return backend, torch.device("cuda", 0)
    local = int(os.environ.get("LOCAL_RANK", "-1"))
    if not 0 <= local < count:
        fail(f"LOCAL_RANK {os.environ.get('LOCAL_RANK')} has no GPU: {count} CUDA devices are visible")
    return backend, torch.device("cuda", local)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["nccl", "gloo"])
    backend, device = choose(parser.parse_args().backend)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's barrier and communicators use the current device
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    print(f"rank={rank} world={world} local_rank={os.environ.get('LOCAL_RANK')} "
          f"port={os.environ.get('MASTER_PORT')} "
          f"node={os.environ.get('SLURMD_NODENAME', socket.gethostname())} sum={t.item():g} "
          f"ok={t.item() == expected} backend={backend} device={device}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
