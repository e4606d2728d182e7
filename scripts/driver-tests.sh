#!/usr/bin/env bash
# The GPU kernel tests on more drivers than llvmpipe (issue 38), with the Khronos validation
# layer on: the `it` binary's GPU tests (a subset that still compiles and runs every WGSL kernel
# gpulab builds on these adapters) and the core library's device::gpu tests, with the test
# binaries `cargo test --release` already built (no build here). Under GPULAB_REQUIRE_GPU=1 they
# cannot skip. Fails on a failed test, on any "Validation Error" from the layer, and when the
# layer did not say it was active; first it checks that the check itself catches a deliberate
# misuse, so a layer that logs nowhere cannot pass for a clean run.
#
#   scripts/driver-tests.sh [DRIVER…]      DRIVER: swiftshader, llvmpipe, gl (default: swiftshader)
#
# The layer validates the Vulkan drivers; GL has no such layer (the tests still must pass there).
#
# Logs in $LOGS (default: a temporary folder): DRIVER.log with the layer's messages, DRIVER.kernels.
set -euo pipefail
cd "$(dirname "$0")/.."

LOGS="${LOGS:-$(mktemp -d)}"
mkdir -p "$LOGS"
drivers=("$@")
[ ${#drivers[@]} -gt 0 ] || drivers=(swiftshader)
SWIFTSHADER_ICD=/usr/lib/chromium/vk_swiftshader_icd.json
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
export GPULAB_REQUIRE_GPU=1

# The `it` tests that run every kernel: each kernel family against the CPU, mixed precision,
# int8, the CNN's convolutions, the grad scaler, the optimizers (one and many per dispatch), a training step and the step
# API, the ledger, and the device count of exercise 6 (module filters: libtest ORs them).
IT_FILTERS=(
  kernels:: amp::gpu_ amp::fp16_is_refused_by_name amp::fused_low_precision_ops amp::coop_
  cnn::conv_kernels_match_the_cpu_on_odd_shapes::gpu cnn::autocast_cnn_first_steps_agree_with_the_cpu::gpu
  cnn::cnn_first_training_steps_agree_with_the_cpu::gpu quant:: scaler:: forward:: step::
  optimizer::optimizer_updates_agree_with_cpu_in_ulps::gpu conformance::accepts_and_refuses_exactly_like_the_cpu::gpu
  training::one_training_step_agrees_with_the_cpu::gpu device_counts:: allocation::gpu_ ledger::gpu_ multi_optim::
)
CORE_FILTERS=(device::gpu::)

# The test binaries of the README's test command, as cargo reports them (already built).
bins=$(cargo test --release --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m.get("profile", {}).get("test"):
        if t.get("name") == "it" or (t.get("name") == "gpulab_core" and t.get("kind") == ["lib"]):
            print(t["name"], m["executable"])
')
it_bin=$(awk '$1 == "it" {print $2}' <<<"$bins")
core_bin=$(awk '$1 == "gpulab_core" {print $2}' <<<"$bins")
[ -x "$it_bin" ] && [ -x "$core_bin" ] || { echo "no built test binaries (it: '$it_bin', gpulab_core: '$core_bin'): run cargo test --release first"; exit 1; }

# The layer logs to stdout: a log file would be truncated by each process (and instance) that
# opens it, losing the earlier processes' messages.
settings="$(mktemp -d)/vk_layer_settings.txt"
cat >"$settings" <<'EOF'
khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG
khronos_validation.log_filename = stdout
khronos_validation.report_flags = error,warn,info
EOF
export VK_LAYER_SETTINGS_PATH="$settings" VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation
ACTIVE="Khronos Validation Layer Active"

# validation_ok LOG WHAT: the layer said it was active and reported no error.
validation_ok() {
  grep -q "$ACTIVE" "$1" || { echo "$2: the validation layer never said \"$ACTIVE\" (not loaded?)"; return 1; }
  if grep -q "Validation Error" "$1"; then
    echo "$2: the validation layer reported errors:"; grep "Validation Error" "$1" | sort | uniq -c | head -20; return 1
  fi
}

# The check catches a misuse: vkCreateInstance with a wrong sType in its VkApplicationInfo.
python3 - >"$LOGS/misuse.log" 2>&1 <<'PY'
import ctypes as C
vk = C.CDLL("libvulkan.so.1")
class AppInfo(C.Structure):
    _fields_ = [("sType", C.c_int), ("pNext", C.c_void_p), ("pApplicationName", C.c_char_p), ("applicationVersion", C.c_uint32),
                ("pEngineName", C.c_char_p), ("engineVersion", C.c_uint32), ("apiVersion", C.c_uint32)]
class CreateInfo(C.Structure):
    _fields_ = [("sType", C.c_int), ("pNext", C.c_void_p), ("flags", C.c_uint32), ("pApplicationInfo", C.POINTER(AppInfo)),
                ("enabledLayerCount", C.c_uint32), ("ppEnabledLayerNames", C.c_void_p),
                ("enabledExtensionCount", C.c_uint32), ("ppEnabledExtensionNames", C.c_void_p)]
app = AppInfo(sType=1, apiVersion=1 << 22)  # VK_STRUCTURE_TYPE_APPLICATION_INFO is 0: a misuse
info = CreateInfo(sType=1, pApplicationInfo=C.pointer(app))
instance = C.c_void_p()
if vk.vkCreateInstance(C.byref(info), None, C.byref(instance)) == 0:
    vk.vkDestroyInstance(instance, None)
PY
if validation_ok "$LOGS/misuse.log" "the deliberate misuse" >/dev/null || ! grep -q "VUID-VkApplicationInfo-sType" "$LOGS/misuse.log"; then
  echo "the validation check does not catch a deliberate misuse:"; cat "$LOGS/misuse.log"; exit 1
fi
echo "validation check: a deliberate misuse is caught (VUID-VkApplicationInfo-sType-sType)"

for d in "${drivers[@]}"; do
  # Vulkan only for a Vulkan driver, so one that fails to load cannot hand the tests to GL.
  case "$d" in
    swiftshader) denv=(WGPU_BACKEND=vulkan VK_ICD_FILENAMES="$SWIFTSHADER_ICD") ;;
    llvmpipe) denv=(WGPU_BACKEND=vulkan) ;;
    gl) denv=(WGPU_BACKEND=gl) ;;
    *) echo "unknown driver $d (swiftshader, llvmpipe, gl)"; exit 1 ;;
  esac
  log="$LOGS/$d.log"
  run() { env GPULAB_TRACE_PIPELINES="$LOGS/$d.kernels" "${denv[@]}" "$@"; }
  echo "== GPU tests on $d ($log)"
  start=$(date +%s)
  status=0
  rm -f "$LOGS/$d.kernels"
  { run "$core_bin" "${CORE_FILTERS[@]}" && run "$it_bin" "${IT_FILTERS[@]}" --skip ::cuda --skip cuda_; } >"$log" 2>&1 || status=$?
  grep -E "^test result|FAILED|panicked" "$log" || true
  echo "$d: $(($(date +%s) - start)) s"
  [ "$status" = 0 ] || { echo "GPU tests failed on $d (see $log)"; exit 1; }
  if [ "$d" != gl ]; then
    validation_ok "$log" "GPU tests on $d" || exit 1
    echo "$d: no validation error ($(grep -c "$ACTIVE" "$log") validated instances)"
  fi
  # The subset compiled every kernel of the registry (crates/core/src/device/gpu/kernels.rs),
  # but the cooperative-matrix GEMM, which needs an adapter with cooperative matrices (its
  # translation is tested by device::gpu::targets).
  missing=$(sed -n 's/^ *\([A-Za-z0-9]*\) => "[a-z0-9_]*\.wgsl",.*/\1/p' crates/core/src/device/gpu/kernels.rs \
    | grep -vx Matmul16Coop | while read -r k; do grep -q "^$k " "$LOGS/$d.kernels" || echo "$k"; done)
  [ -z "$missing" ] || { echo "$d: the GPU test subset compiled no" $missing "(add a test filter that runs them)"; exit 1; }
  echo "$d: every kernel compiled ($(sort -u "$LOGS/$d.kernels" | wc -l) kernel × type pipelines)"
done
