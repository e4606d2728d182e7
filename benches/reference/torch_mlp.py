#!/usr/bin/env python3
"""Reference MLP training throughput with PyTorch on CPU.

Optional tooling for comparing gpulab's CPU MLP training; not used by the app or its tests.

Model: Linear(784,256) -> ReLU -> Linear(256,128) -> ReLU -> Linear(128,10), f32,
softmax cross-entropy (nn.CrossEntropyLoss), SGD(lr=0.01, momentum=0.9).
Data: a fixed pool of random batches made before timing and reused round-robin,
so data generation is not measured. Each timed step is the full step:
zero_grad, forward, loss, backward, optimizer step.

Prints one JSON line per batch size to stdout:
    {"impl":"torch","batch":B,"samples_per_s":X,"step_ms_median":M, ...}
samples_per_s = batch * steps / total wall time of the timed steps.
"""
import argparse
import json
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
    args = p.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, "
          f"interop_threads={torch.get_num_interop_threads()}, "
          f"mkldnn={torch.backends.mkldnn.is_available()}, mkl={torch.backends.mkl.is_available()}, "
          f"cpu_capability={torch.backends.cpu.get_cpu_capability()}", file=sys.stderr)

    for bs in args.batch:
        model = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, 10),
        )
        loss_fn = nn.CrossEntropyLoss()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        xs = [torch.randn(bs, 784) for _ in range(args.pool)]
        ys = [torch.randint(0, 10, (bs,)) for _ in range(args.pool)]

        def step(i):
            x, y = xs[i % args.pool], ys[i % args.pool]
            opt.zero_grad()
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
            elif t1 - t_start >= args.seconds and len(times) >= 5:
                break
        total = time.perf_counter() - t_start
        n = len(times)
        print(json.dumps({
            "impl": "torch", "batch": bs,
            "samples_per_s": round(bs * n / total, 1),
            "step_ms_median": round(statistics.median(times) * 1e3, 4),
            "step_ms_min": round(min(times) * 1e3, 4),
            "steps": n, "total_s": round(total, 3), "threads": torch.get_num_threads(),
            "final_loss": round(float(loss.detach()), 4),
        }), flush=True)


if __name__ == "__main__":
    main()
