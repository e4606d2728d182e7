#!/usr/bin/env python3
"""Reference f32 GEMM throughput with numpy (whatever BLAS numpy ships, usually OpenBLAS).

Optional tooling for comparing gpulab's CPU GEMM; not used by the app or its tests.

Prints one JSON line per size to stdout:
    {"impl":"numpy","n":N,"gflops":G,"median_s":S, ...}
and the BLAS in use (threadpoolctl's threadpool_info) to stderr.
GFLOP/s counts 2*n^3 floating-point operations per n x n x n GEMM.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits


def parse_sizes(s):
    return [int(x) for x in s.split(",") if x.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=parse_sizes, default=[256, 1024, 2048],
                   help="comma-separated square sizes n (default 256,1024,2048)")
    p.add_argument("--threads", type=int, default=2, help="BLAS threads, set via threadpoolctl (default 2)")
    p.add_argument("--repeats", type=int, default=7, help="timed samples per size, median reported (>=5, default 7)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up GEMMs per size (default 2)")
    p.add_argument("--min-sample-s", type=float, default=0.05,
                   help="each timed sample repeats the GEMM until it lasts at least this long (default 0.05 s)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.repeats < 5:
        p.error("--repeats must be >= 5")

    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if var in os.environ:
            print(f"warning: {var}={os.environ[var]} is set; it can force a slower OpenBLAS kernel. "
                  f"Run with `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ...` to benchmark.", file=sys.stderr)

    rng = np.random.default_rng(args.seed)
    with threadpool_limits(limits=args.threads):
        # Report the BLAS actually loaded (after limits, so num_threads is the effective value).
        np.dot(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32))
        for info in threadpool_info():
            keep = {k: info.get(k) for k in ("user_api", "internal_api", "version", "num_threads",
                                             "threading_layer", "architecture", "filepath") if k in info}
            print("blas: " + json.dumps(keep), file=sys.stderr)
        print(f"numpy {np.__version__}", file=sys.stderr)

        for n in args.sizes:
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            c = np.empty((n, n), dtype=np.float32)
            for _ in range(max(1, args.warmup)):
                np.matmul(a, b, out=c)
            t0 = time.perf_counter()  # calibrate the inner repeat count on a warm call
            np.matmul(a, b, out=c)
            one = time.perf_counter() - t0
            inner = max(1, int(args.min_sample_s / max(one, 1e-9)))
            samples = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for _ in range(inner):
                    np.matmul(a, b, out=c)
                samples.append((time.perf_counter() - t0) / inner)
            med = statistics.median(samples)
            gflops = 2.0 * n ** 3 / med / 1e9
            print(json.dumps({"impl": "numpy", "n": n, "gflops": round(gflops, 2), "median_s": med,
                              "min_s": min(samples), "repeats": args.repeats, "inner": inner,
                              "threads": args.threads, "dtype": "float32"}), flush=True)


if __name__ == "__main__":
    main()
