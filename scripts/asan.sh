#!/usr/bin/env bash
# Runs the unsafe code's tests under AddressSanitizer (nightly toolchain): the CPU backend's
# SIMD kernels (crates/core/src/device/cpu/: the int8 and bf16 GEMMs, the quantize intrinsics,
# the packers) and the parallel module's (crates/systems/src/parallel/: the ring collectives'
# unit tests, which include ranks that disagree, panic or leave mid-call). Its own target folder (target/asan), so the
# normal build stays valid. Not in .ci/run: building wgpu, tokio and the rest with the sanitizer
# costs more than CI's budget (the note quotes a run). Usage: scripts/asan.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
host="$(rustc +nightly -vV | sed -n 's/^host: //p')"
export RUSTFLAGS="-Zsanitizer=address" RUSTDOCFLAGS="-Zsanitizer=address"
# Leaks are out of scope here (thread pools live for the process); reads and writes out of
# bounds, use after free and double free are what the kernels and the ring could get wrong.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
run() { cargo +nightly test --release --target "$host" --target-dir target/asan "$@"; }

run -p gpulab-core --lib device::cpu
run -p gpulab-systems --lib parallel::
