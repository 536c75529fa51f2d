"""One rank of the DDP test (run by test_torch.py).

    ddp_worker.py RANK WORLD INIT_FILE OUT_PREFIX STEPS

Trains the same small MLP twice from the same initial weights on the same
per-rank data: once with the Homa DDP hook, once with DDP's default gloo
allreduce, and saves both final parameter sets to OUT_PREFIX.<rank>.pt.
"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import homa
import homa.torch


def train(model, hook_state, steps, rank):
    ddp = DDP(model, bucket_cap_mb=0.25)  # several buckets per step
    if hook_state is not None:
        ddp.register_comm_hook(hook_state, homa.torch.allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randn(32, 20, generator=gen)
        y = (x[:, :5].sum(1, keepdim=True) > 0).float()
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(ddp(x), y)
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, loss.item()


def make_model():
    torch.manual_seed(0)
    # 1.6 MB of parameters: DDP's first bucket holds up to 1 MB, so with
    # bucket_cap_mb=0.25 each step has three buckets (two sizes of them).
    return nn.Sequential(nn.Linear(20, 256), nn.ReLU(), nn.Linear(256, 512), nn.ReLU(),
                         nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 1))


def main():
    rank, world, init_file, out, steps = sys.argv[1:6]
    rank, world, steps = int(rank), int(world), int(steps)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    # Endpoints through the default store.  A 1 s RPC timeout: the test
    # machine may be busy.
    rt = homa.Runtime(config={"timeout_ticks": 1000})
    state = homa.torch.state(timeout_ms=20000, runtime=rt)
    homa_params, homa_loss = train(make_model(), state, steps, rank)
    buckets = state.buckets
    state.close()
    rt.close()
    gloo_params, gloo_loss = train(make_model(), None, steps, rank)
    torch.save({"homa": homa_params, "gloo": gloo_params, "buckets": buckets,
                "losses": (homa_loss, gloo_loss)}, f"{out}.{rank}.pt")
    dist.destroy_process_group()
    print(f"rank {rank}: losses homa {homa_loss:.4f} gloo {gloo_loss:.4f}, {buckets} buckets")


if __name__ == "__main__":
    main()
