#!/usr/bin/env python3
"""Reference MLP / CNN training throughput with PyTorch on CPU.

Optional tooling for comparing gpulab's CPU training (`gpulab bench train`); not used by the
app or its tests.

Model (--model mlp): Linear(784,256) -> ReLU -> Linear(256,128) -> ReLU -> Linear(128,10).
Model (--model cnn, gpulab's `--model cnn` on 1x28x28): Conv2d(1,16,3,pad 1) -> ReLU ->
MaxPool2d(2) -> Conv2d(16,32,3,pad 1) -> ReLU -> MaxPool2d(2) -> the same dense layers on 1568.
Softmax cross-entropy (nn.CrossEntropyLoss), SGD(lr=0.01, momentum=0.9).
Precision (--precision fp32,bf16): bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (f32 master weights, oneDNN bf16 GEMMs), as
gpulab's `--precision bf16` does.
Data: a fixed pool of random batches made before timing and reused round-robin,
so data generation is not measured. Each timed step is the full step:
zero_grad, forward, loss, backward, optimizer step.

Prints one JSON line per batch size and precision to stdout:
    {"impl":"torch","batch":B,"samples_per_s":X,"step_ms_median":M,"step_ms_p90":P, ...}
samples_per_s = batch * steps / total wall time of the timed steps; step_ms_wall the same as
ms per step. step_ms_median / _p90 / _worst: over windows of 10 consecutive steps, exactly
as `gpulab bench train` reports them (step_ms_step_median: the median single step).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
from torch import nn


def parse_list(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=parse_list, default=[32, 128, 512],
                   help="comma-separated batch sizes (default 32,128,512)")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (default 2)")
    p.add_argument("--warmup", type=int, default=20, help="untimed warm-up steps per batch size (default 20)")
    p.add_argument("--steps", type=int, default=0,
                   help="timed steps per batch size; 0 = run for --seconds instead (default 0)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="time budget per batch size when --steps is 0 (default 3.0)")
    p.add_argument("--pool", type=int, default=64, help="number of pre-made random batches (default 64)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--precision", default="fp32",
                   help="comma-separated: fp32, bf16 (autocast); interleaved per batch (default fp32)")
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, "
          f"interop_threads={torch.get_num_interop_threads()}, "
          f"mkldnn={torch.backends.mkldnn.is_available()}, mkl={torch.backends.mkl.is_available()}, "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)

    precisions = [x.strip() for x in args.precision.split(",") if x.strip()]
    for bs in args.batch:
        for prec in precisions:
            run(args, bs, prec)


def make_model(kind):
    head = [nn.Linear(784 if kind == "mlp" else 32 * 7 * 7, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10)]
    if kind == "mlp":
        return nn.Sequential(*head)
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), *head)


def window_stats(times, width=10):
    """ms per step over consecutive windows of `width` steps: median, p90 (nearest rank), worst."""
    w = sorted(sum(times[i:i + width]) / width * 1e3 for i in range(0, len(times) - width + 1, width))
    if not w:
        return 0.0, 0.0, 0.0
    rank = min(max(math.ceil(0.9 * len(w)), 1), len(w))
    return statistics.median(w), w[rank - 1], w[-1]


def run(args, bs, prec):
    if prec not in ("fp32", "bf16"):
        sys.exit(f"unknown --precision {prec!r}: expected fp32 or bf16")
    model = make_model(args.model)
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    shape = (bs, 784) if args.model == "mlp" else (bs, 1, 28, 28)
    xs = [torch.randn(*shape) for _ in range(args.pool)]
    ys = [torch.randint(0, 10, (bs,)) for _ in range(args.pool)]

    def step(i):
        x, y = xs[i % args.pool], ys[i % args.pool]
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=prec == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    i = 0
    for _ in range(args.warmup):
        step(i)
        i += 1

    times = []
    t_start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        loss = step(i)
        t1 = time.perf_counter()
        times.append(t1 - t0)
        i += 1
        if args.steps > 0:
            if len(times) >= args.steps:
                break
        elif t1 - t_start >= args.seconds and len(times) >= 20:
            break
    total = time.perf_counter() - t_start
    n = len(times)
    med, p90, worst = window_stats(times)
    print(json.dumps({
        "impl": "torch", "model": args.model, "precision": prec, "batch": bs,
        "samples_per_s": round(bs * n / total, 1),
        "step_ms_wall": round(total / n * 1e3, 4),
        "step_ms_median": round(med, 4), "step_ms_p90": round(p90, 4), "step_ms_worst": round(worst, 4),
        "step_ms_step_median": round(statistics.median(times) * 1e3, 4),
        "step_ms_min": round(min(times) * 1e3, 4),
        "steps": n, "total_s": round(total, 3), "threads": torch.get_num_threads(),
        "final_loss": round(float(loss.detach()), 4),
    }), flush=True)


if __name__ == "__main__":
    main()
