"""gpulab exercise 6, handed off to PyTorch DistributedDataParallel.

Written by `gpulab export torch --exercise distributed`. The same MLP (Linear + ReLU, softmax
cross-entropy), the same initial weights (init.safetensors, nn.Linear's [out, in] layout), the
same data and per-epoch shuffling order (data.safetensors) and the same hyperparameters
(config.json) as the gpulab run it was exported from.

Run:
    torchrun --nproc-per-node N train_ddp.py             # N processes on this machine
    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d \\
             --rdzv-endpoint HOST:29400 train_ddp.py     # two machines (run on each)
    python train_ddp.py                                  # one process, no torchrun
Options: --max-steps K stops after K optimizer steps; --compare checks the first logged losses
against gpulab's (gpulab_losses.json) and exits non-zero when they differ beyond the tolerance.

What differs from gpulab (everything else is the same by construction):
  * Kernels: PyTorch's GEMMs sum in a different order than gpulab's, so losses agree to about
    1e-5 relative at first and drift apart slowly over many steps (float32 is not associative).
    TF32 is switched off below so CUDA GPUs also compute in full float32.
  * Communication: DDP all-reduces gradient buckets with NCCL (GPUs) or Gloo (CPU) instead of
    gpulab's ring over host memory; DDP's bucket_cap_mb is taken from gpulab's setting.
  * The global batch is split into contiguous equal chunks, one per process; each process's
    loss is scaled so that DDP's average equals the mean over the whole global batch, also for
    a last batch that does not divide evenly - the same update gpulab makes.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))


class Mlp(nn.Module):
    """gpulab's MLP: Linear layers with ReLU between them, logits out."""

    def __init__(self, widths):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


def make_optimizer(cfg, params):
    o = cfg["optimizer"]
    if o["kind"] == "sgd":
        # PyTorch's SGD is gpulab's: v = momentum * v + (g + wd * p); p -= lr * v.
        return torch.optim.SGD(params, lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"])
    return torch.optim.AdamW(params, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=o["weight_decay"])


def compare(logged, tolerance):
    """Checks this run's first losses against the ones gpulab logged for the same steps."""
    with open(os.path.join(HERE, "gpulab_losses.json")) as f:
        ref = json.load(f)["losses"]
    n = min(len(ref), len(logged))
    if n == 0:
        print("compare: nothing to compare", file=sys.stderr)
        return False
    worst = 0.0
    for (step, ours), theirs in zip(logged[:n], ref[:n]):
        rel = abs(ours - theirs) / max(1.0, abs(theirs))
        worst = max(worst, rel)
        print(f"compare step {step}: torch {ours:.6f} gpulab {theirs:.6f} relative difference {rel:.2e}")
    ok = worst <= tolerance
    print(f"compare: {n} steps, worst relative difference {worst:.2e}, tolerance {tolerance:.0e}: {'OK' if ok else 'DIFFERENT'}")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many optimizer steps (0: every epoch)")
    p.add_argument("--compare", action="store_true", help="compare the first losses with gpulab_losses.json")
    args = p.parse_args()
    with open(os.path.join(HERE, "config.json")) as f:
        cfg = json.load(f)

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    distributed = "MASTER_ADDR" in os.environ  # torchrun sets it; plain python does not
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if distributed:
        dist.init_process_group(backend)
        world, rank = dist.get_world_size(), dist.get_rank()

    data = load_file(os.path.join(HERE, "data.safetensors"))
    train_x, train_y = data["train_x"].to(device), data["train_y"].to(device)
    val_x, val_y = data["val_x"].to(device), data["val_y"].to(device)
    order = data["order"]  # [epochs, n]: gpulab's shuffle of each epoch

    model = Mlp(cfg["widths"]).to(device)
    model.load_state_dict(load_file(os.path.join(HERE, "init.safetensors")))
    net = model
    if distributed:
        ids = [local_rank] if device.type == "cuda" else None
        net = nn.parallel.DistributedDataParallel(model, device_ids=ids, bucket_cap_mb=cfg["bucket_cap_mb"])
    opt = make_optimizer(cfg, net.parameters())

    batch, n = cfg["batch"], train_x.shape[0]
    if rank == 0:
        print(f"world size {world} ({backend}), global batch {batch}, {n} training samples, model {cfg['widths']}", flush=True)
    step, logged, done = 0, [], False
    for epoch in range(cfg["epochs"]):
        net.train()
        idx_all = order[epoch]
        for start in range(0, n, batch):
            idx = idx_all[start:start + batch]
            mine = idx[rank * len(idx) // world:(rank + 1) * len(idx) // world].to(device)
            logits = net(train_x[mine])
            loss_sum = F.cross_entropy(logits, train_y[mine], reduction="sum")
            # DDP averages over processes: scaling by world / rows makes that the global mean.
            opt.zero_grad(set_to_none=True)
            (loss_sum * (world / len(idx))).backward()
            opt.step()
            step += 1
            stats = torch.stack([loss_sum.detach().double(), torch.tensor(float(len(mine)), dtype=torch.float64, device=device)])
            if distributed:
                dist.all_reduce(stats)
            mean = (stats[0] / stats[1]).item()
            logged.append((step, mean))
            if rank == 0:
                print(f"step {step} epoch {epoch} loss {mean:.6f}", flush=True)
            if args.max_steps and step >= args.max_steps:
                done = True
                break
        if rank == 0:
            model.eval()
            with torch.no_grad():
                acc = (model(val_x).argmax(dim=1) == val_y).double().mean().item()
            print(f"epoch {epoch} val_accuracy {acc:.4f}", flush=True)
        if done:
            break
    ok = compare(logged, cfg["compare_tolerance"]) if args.compare and rank == 0 else True
    if distributed:
        dist.destroy_process_group()
        # Some torch builds abort at interpreter exit after Gloo ran ("terminate called without
        # an active exception"), though the run finished and printed: flush and leave without
        # the interpreter's teardown, so the exit code is the run's.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0 if ok else 1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
