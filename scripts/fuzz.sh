#!/usr/bin/env bash
# Fuzzes gpulab's file and request parsers (fuzz/fuzz_targets/) with cargo-fuzz on the nightly
# toolchain: builds every target in one call, then runs each for SECONDS (default 60) from its
# seed corpus (fuzz/corpus/<target>/, read only: new inputs go to a scratch folder). Exits
# non-zero on the first crash, leak, timeout or out-of-memory; the input that caused it is in
# fuzz/artifacts/<target>/. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
# Installs cargo-fuzz (crates.io) and the nightly toolchain when missing. .ci/run runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
shift || true
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
# Release with debug assertions (fuzz/Cargo.toml's profile), AddressSanitizer (the default).
cargo +nightly fuzz build

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
for t in "${targets[@]}"; do
  mkdir -p "$scratch/$t"
  echo "fuzzing $t for ${seconds}s"
  # -rss_limit_mb: the parsers' own bounds keep them far below it; -timeout: one input's limit.
  # The log's last lines carry the run's totals (executions, corpus); a finding stops the run.
  cargo +nightly fuzz run "$t" "$scratch/$t" "fuzz/corpus/$t" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    >"$scratch/$t.log" 2>&1 || { cat "$scratch/$t.log"; echo "fuzz target $t failed; the input is in fuzz/artifacts/$t/"; exit 1; }
  grep -E '^Done [0-9]+ runs' "$scratch/$t.log" | sed "s/^/  $t: /"
done
