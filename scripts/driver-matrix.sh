#!/usr/bin/env bash
# One quick run of every GPU exercise on each driver this machine reaches (issue 38), with the
# built binary (no build here): each must run, or refuse by name — a precision the adapter
# cannot run ("fp16 needs SHADER_F16 …") or a limit it lacks (Error::BeyondLimit). A kernel
# that fails to compile, a panic or any other failure fails the script. Prints the table
# driver × exercise × precision → ran / refused (reason), also written to $TABLE.
#
#   scripts/driver-matrix.sh [DRIVER…]      DRIVER: llvmpipe, swiftshader, gl (default: all three)
#
# GPULAB_BIN (default target/release/gpulab), TABLE (default: a temporary file), ONLY (exercise
# ids, comma-separated). The GL backend needs a display: the script runs itself under xvfb-run
# when there is none. A driver that is missing fails (CI installs them all).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${DISPLAY:-}" ] && command -v xvfb-run >/dev/null 2>&1 && [ -z "${DRIVER_MATRIX_XVFB:-}" ]; then
  DRIVER_MATRIX_XVFB=1 exec xvfb-run -a "$0" "$@"
fi

BIN="${GPULAB_BIN:-target/release/gpulab}"
TABLE="${TABLE:-$(mktemp -d)/driver-matrix.md}"
SWIFTSHADER_ICD=/usr/lib/chromium/vk_swiftshader_icd.json
[ -x "$BIN" ] || { echo "no $BIN: build it first (cargo build --release)"; exit 1; }
drivers=("$@")
[ ${#drivers[@]} -gt 0 ] || drivers=(llvmpipe swiftshader gl)
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
work="$(mktemp -d)"
export GPULAB_CACHE_DIR="$work/cache"

# Each GPU exercise's quick settings (its `quick_run`, moved to the GPU and made smaller where
# the defaults would take minutes on a software driver). An exercise missing here fails below.
declare -A RUN=(
  [cpu-vs-gpu]="backends=gpu epochs=1 hidden=32 size=as-set sweep_sizes=16,32 sweep_runs=1"
  [batch-sweep]="backend=gpu dataset=digits hidden=32 epochs=1 batch_sizes=16,4096 vram_budget_mib=2"
  [precision]="backend=gpu epochs=1 hidden=32 size=as-set demo_epochs=1"
  [input-pipeline]="backend=gpu dataset=shapes:res=8,n=240 hidden=16 batch=32 epochs=1 storage_latency_ms=1 decode_passes=1"
  [checkpoint]="backend=gpu epochs=1 hidden=16 checkpoint_every=6 crash_at=20 corrupt=truncate"
  [distributed]="kind=gpu replicas=1,2 dataset=digits hidden=32 size=as-set epochs=1 batch=64 bucket_cap_mb=0.01"
  [profiling]="backend=gpu dataset=shapes:res=8,n=240 hidden=16 batch=32 epochs=1 storage_latency_ms=1 decode_passes=1"
  [inference-batching]="backend=gpu train_epochs=1 static_batches=1,4 max_batch=4 preferred_batch=4 load_levels=30 run_seconds=0.5"
  [quantization]="backends=gpu epochs=1 hidden=32 latency_runs=2"
  [platform]="calibration=this-machine calibration_backend=gpu scenario=bad-release duration_h=10 sweep_points=4 sweep_runs=3"
)

# On Vulkan the Khronos validation layer is on, logging to stdout (the run's log): a
# "Validation Error" there fails the run, as in scripts/driver-tests.sh.
cat >"$work/vk_layer_settings.txt" <<'EOF'
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.log_filename = stdout
khronos_validation.report_flags = error,warn,info
EOF
layer="VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation VK_LAYER_SETTINGS_PATH=$work/vk_layer_settings.txt"

env_of() {
  case "$1" in
    llvmpipe) echo "WGPU_BACKEND=vulkan $layer" ;;
    swiftshader) echo "WGPU_BACKEND=vulkan VK_ICD_FILENAMES=$SWIFTSHADER_ICD $layer" ;;
    gl) echo "WGPU_BACKEND=gl" ;;
    *) echo "unknown driver $1 (llvmpipe, swiftshader, gl)" >&2; return 1 ;;
  esac
}

# The adapter `gpulab info` must show first, proving the driver is the one the runs use.
shows() {
  case "$1" in
    llvmpipe) echo '"name": "llvmpipe' ;;
    swiftshader) echo '"name": "SwiftShader' ;;
    gl) echo '"backend": "Gl"' ;;
  esac
}

exercises=$("$BIN" list | awk '{print $1}')
rows=()
failed=0
for d in "${drivers[@]}"; do
  denv=$(env_of "$d")
  layered=0
  [[ "$denv" != *VK_LAYER_KHRONOS_validation* ]] || layered=1
  # shellcheck disable=SC2086
  info=$(env $denv VK_INSTANCE_LAYERS= "$BIN" info --json 2>/dev/null) || true
  first=$(python3 -c 'import json,sys; a=json.loads(sys.stdin.read()).get("adapters") or [{}]; print(json.dumps(a[0]))' <<<"$info" 2>/dev/null || true)
  if ! grep -q "$(shows "$d")" <<<"$first"; then
    echo "driver $d: gpulab info does not show its adapter first:"; echo "$info" | head -20
    rows+=("| $d | (all) | — | FAILED: no adapter |"); failed=1; continue
  fi
  adapter=$(python3 -c 'import json,sys; a=json.loads(sys.stdin.read()); print(a["name"], "("+a["backend"]+")")' <<<"$first")
  echo "== $d: $adapter"
  for e in $exercises; do
    if [ -n "${ONLY:-}" ] && ! grep -qw -- "$e" <<<"${ONLY//,/ }"; then continue; fi
    [ -n "${RUN[$e]+x}" ] || { echo "exercise $e has no quick GPU settings in $0"; rows+=("| $d | $e | — | FAILED: not in the script |"); failed=1; continue; }
    out="$work/$d-$e"
    sets=()
    for kv in ${RUN[$e]}; do sets+=(--set "$kv"); done
    start=$(date +%s)
    rc=0
    # shellcheck disable=SC2086
    env $denv timeout 300 "$BIN" run "$e" "${sets[@]}" --out "$out" >"$out.log" 2>&1 || rc=$?
    secs=$(($(date +%s) - start))
    summary=$(python3 - "$out/report.json" "$out.log" "$rc" "$layered" <<'PY'
import json, re, sys
path, log_path, rc, layered = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
log = open(log_path, errors="replace").read()

def reason(text):
    """The capability or limit a refusal names, else its first words."""
    names = re.findall(r"\b(SHADER_F16|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|max_[a-z_]+)\b", text)
    return ", ".join(dict.fromkeys(names)) or text[:90]

bad = [m for m in ("failed to compile", "panicked at", "Validation Error") if m in log]
if layered and "Khronos Validation Layer Active" not in log:
    bad.append("the validation layer was not active")
if bad or rc != 0:
    refusal = re.search(r"(the kernel cannot run on this adapter|needs SHADER_F16)", log)
    if not bad and rc != 0 and refusal:
        print(f"all\trefused ({reason(log)})\tok")
    else:
        tail = " / ".join(l.strip() for l in log.strip().splitlines()[-3:])
        print(f"all\tFAILED (rc {rc}{', ' + ', '.join(bad) if bad else ''}): {tail[:300]}\tfail")
    sys.exit()
report = json.load(open(path))
rows = []
for t in report.get("tables", []):
    # The table of precisions an exercise compares: a precision (or model) and a status column.
    cols = [c["name"] for c in t["columns"]]
    what = next((cols.index(n) for n in ("precision", "model") if n in cols), None)
    if what is not None and "status" in cols:
        rows = [(r[what], r[cols.index("status")]) for r in t["rows"]]
        break
if not rows:
    print("fp32\tran\tok")
for what, status in rows:
    if status == "ok":
        print(f"{what}\tran\tok")
    elif status.startswith("unavailable: "):
        print(f"{what}\trefused ({reason(status)})\tok")
    else:
        print(f"{what}\t{status[:120]}\tok")
PY
)
    while IFS=$'\t' read -r prec result verdict; do
      rows+=("| $d | $e | $prec | $result |")
      echo "  $e · $prec: $result (${secs}s)"
      [ "$verdict" = ok ] || { failed=1; echo "---- $out.log (tail)"; tail -20 "$out.log"; }
    done <<<"$summary"
  done
done

{
  echo "| driver | exercise | precision | result |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$TABLE"
[ "$failed" = 0 ] || { echo "driver matrix: a run failed (see above)"; exit 1; }
