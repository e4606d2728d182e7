//! Mixed precision: 16-bit casts bit-exact against the `half` crate, 16-bit matmuls against an
//! f64 reference, the fused ops against the CPU reference, and digits training in FP16 (+
//! GradScaler) and BF16 within 1.5 points of FP32 — on the CPU and on the GPU.

use gpulab::data::{self, DatasetSpec};
use gpulab::device::CpuBackend;
use gpulab::device::gpu::{Matmul16Variant, tuning};
use gpulab::nn::{AmpConfig, Precision};
use gpulab::tensor::{DType, Epilogue, MemCategory as M, float16, prelude::*, scaler};
use gpulab::train::{NullSink, TrainConfig, train};

use crate::common::{random, runs_16bit, with_gpu};

const LOW: [DType; 2] = [DType::F16, DType::BF16];

/// Every f16 and bf16 value (all 65536 patterns of each, so subnormals, ±inf and NaNs), values
/// between them that need rounding (ties included), f32 subnormals, overflow and specials.
fn sampled_f32() -> Vec<f32> {
    let mut v = Vec::new();
    for bits in 0..=u16::MAX {
        v.push(float16::widen(DType::F16, bits));
        v.push(float16::widen(DType::BF16, bits));
    }
    for bits in (0..u32::MAX).step_by(65_521) {
        v.push(f32::from_bits(bits));
    }
    // Halfway between neighbouring f16 values (ties to even) and just off them.
    for bits in (0x0001u32..0x7bff).step_by(97) {
        let (a, b) = (float16::widen(DType::F16, bits as u16), float16::widen(DType::F16, bits as u16 + 1));
        let mid = (a + b) / 2.0;
        v.extend([mid, -mid, f32::from_bits(mid.to_bits() + 1), f32::from_bits(mid.to_bits() - 1)]);
    }
    v.extend([
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        65504.0,
        65520.0,
        65519.99,
        1e-8,
        3e-8,
        5.96e-8,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    v
}

fn same_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
        } else {
            assert_eq!(g.to_bits(), w.to_bits(), "{what}[{i}]: got {g:e} ({:#010x}), want {w:e} ({:#010x})", g.to_bits(), w.to_bits());
        }
    }
}

/// f32 -> 16 bits -> f32 through the backend's cast kernels; returns (as stored, widened back).
fn cast_round_trip<B: Backend>(b: &mut B, dt: DType, x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let shape = [1, x.len()];
    let src = b.upload_f32(x, shape, M::Inputs).unwrap();
    let mut low = b.zeros(shape, dt, M::Activations).unwrap();
    b.cast(&src, &mut low, None).unwrap();
    let mut back = b.upload_f32(&vec![f32::NAN; x.len()], shape, M::Activations).unwrap();
    b.cast(&low, &mut back, None).unwrap();
    (b.read_f32(&low).unwrap(), b.read_f32(&back).unwrap())
}

fn check_casts<B: Backend>(b: &mut B, name: &str) {
    let x = sampled_f32();
    for dt in LOW {
        if !runs_16bit(b, dt, name) {
            continue;
        }
        let want: Vec<f32> = x.iter().map(|&v| float16::round(dt, v)).collect();
        let (stored, back) = cast_round_trip(b, dt, &x);
        same_bits(&format!("{name} {} cast", dt.name()), &stored, &want);
        same_bits(&format!("{name} {} cast back", dt.name()), &back, &want);
        // Odd lengths: the last word is half used.
        let (_, back) = cast_round_trip(b, dt, &x[..257]);
        same_bits(&format!("{name} {} odd length", dt.name()), &back, &want[..257]);
    }
}

#[test]
fn cpu_casts_match_half_bit_for_bit() {
    check_casts(&mut CpuBackend::new(), "cpu");
}

#[test]
fn gpu_casts_match_half_bit_for_bit() {
    with_gpu("gpu_casts_match_half_bit_for_bit", |gpu| check_casts(gpu, "gpu"));
}

#[test]
fn cuda_casts_match_half_bit_for_bit() {
    crate::common::cuda::with("cuda_casts_match_half_bit_for_bit", |c| check_casts(c, "cuda"));
}

/// c = op(a)·op(b) in f64 from the 16-bit-rounded operands.
fn reference(a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), ta: bool, tb: bool) -> Vec<f64> {
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| {
                    let av = if ta { a[p * m + i] } else { a[i * k + p] };
                    let bv = if tb { b[j * k + p] } else { b[p * n + j] };
                    av as f64 * bv as f64
                })
                .sum();
        }
    }
    c
}

/// Relative error in the Frobenius norm, against `want`.
fn rel_err(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(g, w)| (*g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    (num / den.max(1e-300)).sqrt()
}

fn check_matmul16<B: Backend>(b: &mut B, name: &str) {
    check_matmul16_types(b, name, &LOW)
}

fn check_matmul16_types<B: Backend>(b: &mut B, name: &str, types: &[DType]) {
    for &dt in types {
        if !runs_16bit(b, dt, name) {
            continue;
        }
        // The output's own rounding bounds the error: 2^-11 for f16, 2^-8 for bf16.
        let bound = if dt == DType::F16 { 1e-3 } else { 1e-2 };
        // Odd shapes take the scalar loads; multiples of 8 that are not multiples of the
        // register block (16×64) take the vector loads with partial blocks.
        let shapes = [
            ((1, 1, 1), false, false),
            ((17, 33, 9), false, false),
            ((65, 31, 129), true, false),
            ((3, 200, 7), false, true),
            ((33, 10, 64), true, true),
            ((40, 72, 24), false, false),
            ((24, 136, 48), true, false),
            ((36, 16, 40), false, true),
            ((48, 8, 19), true, true),
            ((20, 130, 13), false, false),
        ];
        for (shape, ta, tb) in shapes {
            let (m, n, k) = shape;
            let a: Vec<f32> = random(m * k, 3, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let bm: Vec<f32> = random(k * n, 4, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let want = reference(&a, &bm, shape, ta, tb);
            let ta_shape = if ta { [k, m] } else { [m, k] };
            let tb_shape = if tb { [n, k] } else { [k, n] };
            let mut la = b.zeros(ta_shape, dt, M::Inputs).unwrap();
            let mut lb = b.zeros(tb_shape, dt, M::Inputs).unwrap();
            b.write_f32(&mut la, &a).unwrap();
            b.write_f32(&mut lb, &bm).unwrap();
            for out in [DType::F32, dt] {
                let mut c = b.zeros([m, n], out, M::Activations).unwrap();
                b.fill(&mut c, f32::NAN).unwrap();
                b.matmul16(&la, &lb, &mut c, ta, tb, Epilogue::None, None).unwrap();
                let got = b.read_f32(&c).unwrap();
                let err = rel_err(&got, &want);
                let tol = if out == DType::F32 { 1e-5 } else { bound };
                assert!(
                    err <= tol,
                    "{name} {} matmul {shape:?} ta={ta} tb={tb} into {}: rel err {err:.2e} > {tol:.0e}",
                    dt.name(),
                    out.name()
                );
            }
        }
    }
}

#[test]
fn cpu_low_precision_matmul_vs_f64() {
    check_matmul16(&mut CpuBackend::new(), "cpu");
}

/// Each 16-bit GEMM variant the device runs (the plain and the register-blocked kernel, and the
/// cooperative-matrix one for f16 where the adapter has it), whichever tuning picks.
#[test]
fn gpu_matmul16_vs_f64() {
    with_gpu("gpu_matmul16_vs_f64", |gpu| {
        for v in Matmul16Variant::ALL {
            let types: Vec<DType> = LOW.into_iter().filter(|&dt| gpu.matmul16_variants(dt).contains(&v)).collect();
            for &dt in &types {
                gpu.set_matmul16_variant(dt, v);
            }
            check_matmul16_types(gpu, &format!("gpu {}", v.name()), &types);
        }
        for dt in LOW {
            if !runs_16bit(gpu, dt, "gpu_matmul16_vs_f64") {
                continue;
            }
            let chosen = tuning::choose16(gpu, dt).unwrap();
            gpu.set_matmul16_choice(dt, chosen);
        }
    });
}

#[test]
fn cuda_matmul16_vs_f64() {
    crate::common::cuda::with("cuda_matmul16_vs_f64", |c| check_matmul16(c, "cuda"));
}

/// The fused epilogues, underflow counts, 16-bit column sums and unscale+check: GPU against CPU.
fn fused_ops<B: Backend>(b: &mut B, dt: DType, (m, n, k): (usize, usize, usize)) -> Vec<Vec<f32>> {
    let mut out = Vec::new();
    let mut la = b.zeros([m, k], dt, M::Inputs).unwrap();
    let mut lb = b.zeros([k, n], dt, M::Inputs).unwrap();
    b.write_f32(&mut la, &random(m * k, 5, -1.0, 1.0)).unwrap();
    b.write_f32(&mut lb, &random(k * n, 6, -1.0, 1.0)).unwrap();
    let bias = b.upload_f32(&random(n, 7, -0.5, 0.5), [1, n], M::Parameters).unwrap();
    let mut act = b.zeros([m, n], dt, M::Activations).unwrap();
    b.fill(&mut act, f32::NAN).unwrap();
    b.matmul16(&la, &lb, &mut act, false, false, Epilogue::Bias { bias: &bias, relu: true }, None).unwrap();
    out.push(b.read_f32(&act).unwrap());
    // Backward through the ReLU with gradients so small that many flush to zero in f16.
    let mut gb = b.zeros([k, n], dt, M::Inputs).unwrap();
    b.write_f32(&mut gb, &random(k * n, 8, -1e-3, 1e-3)).unwrap();
    let mut tiny = b.zeros([m, n], dt, M::Activations).unwrap();
    b.fill(&mut tiny, f32::NAN).unwrap();
    let mut small_a = b.zeros([m, k], dt, M::Inputs).unwrap();
    b.write_f32(&mut small_a, &random(m * k, 9, -1e-4, 1e-4)).unwrap();
    let mut stats = b.zeros([1, 2], DType::U32, M::Other).unwrap();
    b.matmul16(&small_a, &gb, &mut tiny, false, false, Epilogue::ReluMask(&act), Some(&mut stats)).unwrap();
    out.push(b.read_f32(&tiny).unwrap());
    let mut sums = b.upload_f32(&vec![f32::NAN; n], [1, n], M::Gradients).unwrap();
    b.sum_cols(&act, &mut sums).unwrap();
    out.push(b.read_f32(&sums).unwrap());
    let x = b.upload_f32(&random(m * n, 10, -1e-6, 1e-6), [m, n], M::Activations).unwrap();
    b.cast(&x, &mut tiny, Some(&mut stats)).unwrap();
    out.push(b.read_u32(&stats).unwrap().iter().map(|&v| v as f32).collect());
    let mut g = b.upload_f32(&random(m * n, 11, -4.0, 4.0), [m, n], M::Gradients).unwrap();
    let mut found = b.zeros([1, scaler::STATE_WORDS], DType::U32, M::Other).unwrap();
    b.write_u32(&mut found, &scaler::state_words(4.0, 0, 0)).unwrap();
    b.unscale_check(&mut g, &mut found).unwrap();
    out.push(b.read_f32(&g).unwrap());
    out.push(vec![b.read_u32(&found).unwrap()[scaler::word::FOUND_INF] as f32]);
    let mut bad = random(m * n, 12, -1.0, 1.0);
    bad[m * n - 1] = f32::INFINITY;
    b.write_f32(&mut g, &bad).unwrap();
    b.unscale_check(&mut g, &mut found).unwrap();
    out.push(vec![b.read_u32(&found).unwrap()[scaler::word::FOUND_INF] as f32]);
    out
}

#[test]
fn fused_low_precision_ops_match_the_cpu() {
    // N odd (a 16-bit word spans two rows: the plain kernel) and N a multiple of 8 (the
    // register-blocked kernel's vector loads, where tuning picks it), each on every type.
    for (dt, shape) in LOW.into_iter().flat_map(|dt| [(dt, (37, 21, 13)), (dt, (37, 64, 24))]) {
        let want = fused_ops(&mut CpuBackend::new(), dt, shape);
        assert_eq!(want[5], [0.0], "finite gradients raise no flag");
        assert_eq!(want[6], [1.0], "an inf gradient raises the flag");
        if dt == DType::F16 {
            assert!(want[3][1] > 0.0, "values near 1e-7 flush in f16: {:?}", want[3]);
        }
        let compare = |got: Vec<Vec<f32>>, backend: &str| {
            let names = ["bias+relu", "relu mask", "sum_cols", "stats", "unscale", "found (finite)", "found (inf)"];
            for ((g, w), what) in got.iter().zip(&want).zip(names) {
                crate::common::assert_close(
                    &format!("{backend} {} {what}", dt.name()),
                    g,
                    w,
                    if what == "stats" || what.starts_with("found") { 0.0 } else { 2e-2 },
                );
            }
        };
        with_gpu("fused_low_precision_ops_match_the_cpu", |gpu| {
            if !runs_16bit(gpu, dt, "fused_low_precision_ops_match_the_cpu") {
                return;
            }
            for v in gpu.matmul16_variants(dt) {
                let chosen = gpu.matmul16_choice(dt).unwrap();
                gpu.set_matmul16_variant(dt, v);
                let got = fused_ops(gpu, dt, shape);
                gpu.set_matmul16_choice(dt, chosen);
                compare(got, &format!("gpu {}", v.name()));
            }
        });
        crate::common::cuda::with("fused_low_precision_ops_match_the_cpu (cuda)", |c| compare(fused_ops(c, dt, shape), "cuda"));
    }
}

/// shaders/matmul16_coop.wgsl as its f16 pipelines compile it (each transpose), parsed and
/// validated by wgpu's naga with the cooperative-matrix capability, then written to SPIR-V with
/// the bounds-check policies wgpu's Vulkan backend uses: runs everywhere, so a typo fails here
/// even where no adapter has the feature. Without the capability naga must refuse it.
#[test]
fn coop_shader_validates_with_naga() {
    use wgpu::naga::back::spv;
    use wgpu::naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    use wgpu::naga::valid::{Capabilities, ValidationFlags, Validator};
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let src = gpulab::device::gpu::matmul16_coop_source(ta, tb).unwrap();
        let module = wgpu::naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| panic!("ta={ta} tb={tb}: {}", e.emit_to_string(&src)));
        // What wgpu gives a Vulkan device with EXPERIMENTAL_COOPERATIVE_MATRIX and SHADER_F16
        // (unpack2x16float needs SHADER_FLOAT16_IN_FLOAT32, a downlevel flag every Vulkan has).
        let f16 = Capabilities::SHADER_FLOAT16 | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
        // SUBGROUP: each subgroup finds its own tiles by its index (has_coop_f16 requires it).
        let caps = Capabilities::COOPERATIVE_MATRIX | Capabilities::SUBGROUP | f16;
        let info = Validator::new(ValidationFlags::all(), caps)
            .validate(&module)
            .unwrap_or_else(|e| panic!("ta={ta} tb={tb}: {}", e.emit_to_string(&src)));
        assert!(
            Validator::new(ValidationFlags::all(), f16 | Capabilities::SUBGROUP).validate(&module).is_err(),
            "naga accepted cooperative matrices without the capability"
        );
        let restrict = BoundsCheckPolicies {
            index: BoundsCheckPolicy::Restrict,
            buffer: BoundsCheckPolicy::Restrict,
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        };
        for policies in [restrict, BoundsCheckPolicies { buffer: BoundsCheckPolicy::Unchecked, ..restrict }] {
            let options = spv::Options { lang_version: (1, 6), bounds_check_policies: policies, ..spv::Options::default() };
            let words = spv::write_vec(&module, &info, &options, None).unwrap_or_else(|e| panic!("ta={ta} tb={tb}: SPIR-V: {e}"));
            assert!(words.len() > 100, "ta={ta} tb={tb}: {} SPIR-V words", words.len());
        }
    }
}

/// The cooperative-matrix variant exists only where the device has the feature: never listed for
/// bf16, never for f16 without it (llvmpipe), and refused by name if set there anyway.
#[test]
fn coop_variant_is_offered_only_with_the_feature() {
    with_gpu("coop_variant_is_offered_only_with_the_feature", |gpu| {
        assert!(!gpu.matmul16_variants(DType::BF16).contains(&Matmul16Variant::Coop));
        let listed = gpu.summary().features.iter().any(|f| f == gpulab::device::gpu::adapters::COOP_MATRIX_F16);
        assert_eq!(listed, gpu.has_coop16(), "{:?}", gpu.summary().features);
        assert_eq!(gpu.matmul16_variants(DType::F16).contains(&Matmul16Variant::Coop), gpu.has_coop16());
        for dt in LOW {
            if !runs_16bit(gpu, dt, "coop_variant_is_offered_only_with_the_feature") {
                continue;
            }
            let runs = gpu.matmul16_variants(dt);
            let choice = gpu.matmul16_choice(dt).unwrap();
            assert!(choice.variants.iter().all(|v| runs.contains(v)), "{} chose a variant it cannot run: {choice:?}", dt.name());
        }
        if gpu.has_coop16() || gpu.amp_unavailable(DType::F16).is_some() {
            return;
        }
        let chosen = gpu.matmul16_choice(DType::F16).unwrap();
        gpu.set_matmul16_variant(DType::F16, Matmul16Variant::Coop);
        let a = gpu.zeros([16, 16], DType::F16, M::Inputs).unwrap();
        let mut c = gpu.zeros([16, 16], DType::F32, M::Activations).unwrap();
        let err = gpu.matmul16(&a, &a, &mut c, false, false, Epilogue::None, None);
        gpu.set_matmul16_choice(DType::F16, chosen);
        let err = err.expect_err("the coop variant ran without the feature").to_string();
        assert!(err.contains("cooperative-matrix") && err.contains("EXPERIMENTAL_COOPERATIVE_MATRIX"), "{err}");
    });
}

/// The cooperative-matrix f16 GEMM against an f64 reference: the shapes of `check_matmul16`
/// (odd sizes, every transpose, f32 and f16 outputs poisoned with NaN first) and products that
/// span many of its 128×32 blocks (a 16-row strip per subgroup and pass, the last pass partial)
/// and 16-deep K steps; then the fused epilogues and underflow counts against the CPU, and each
/// output counted once (no tile stored twice). Where the device lacks the feature (llvmpipe,
/// SwiftShader) it prints why it skipped; under GPULAB_REQUIRE_COOP=1 (scripts/gpu-check.sh sets
/// it where `gpulab info` lists COOPERATIVE_MATRIX_F16) a skip is a failure.
#[test]
fn gpu_coop_matmul16_vs_f64_on_odd_shapes() {
    with_gpu("gpu_coop_matmul16_vs_f64_on_odd_shapes", |gpu| {
        if !gpu.has_coop16() {
            let why = format!(
                "{} was not opened with cooperative matrices (EXPERIMENTAL_COOPERATIVE_MATRIX with a 16×16×16 f16/f32 configuration, SUBGROUP sizes 8–64); it opened with {:?}",
                gpu.summary().name,
                gpu.summary().features
            );
            assert!(std::env::var("GPULAB_REQUIRE_COOP").map_or(true, |v| v != "1"), "GPULAB_REQUIRE_COOP=1 but {why}");
            eprintln!("SKIPPED gpu_coop_matmul16_vs_f64_on_odd_shapes: {why} (set GPULAB_REQUIRE_COOP=1 to make this a failure)");
            return;
        }
        let chosen = gpu.matmul16_choice(DType::F16).unwrap();
        gpu.set_matmul16_variant(DType::F16, Matmul16Variant::Coop);
        check_matmul16_types(gpu, "gpu coop", &[DType::F16]);
        let dt = DType::F16;
        for ((m, n, k), ta, tb) in [
            ((64, 64, 64), false, false),
            ((96, 160, 288), false, false),
            ((97, 161, 289), true, false),
            ((130, 66, 1000), false, true),
            ((33, 258, 95), true, true),
            ((256, 256, 256), false, false),
        ] {
            let a: Vec<f32> = random(m * k, 13, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let bm: Vec<f32> = random(k * n, 14, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let want = reference(&a, &bm, (m, n, k), ta, tb);
            let mut la = gpu.zeros(if ta { [k, m] } else { [m, k] }, dt, M::Inputs).unwrap();
            let mut lb = gpu.zeros(if tb { [n, k] } else { [k, n] }, dt, M::Inputs).unwrap();
            gpu.write_f32(&mut la, &a).unwrap();
            gpu.write_f32(&mut lb, &bm).unwrap();
            for out in [DType::F32, dt] {
                let mut c = gpu.zeros([m, n], out, M::Activations).unwrap();
                gpu.fill(&mut c, f32::NAN).unwrap();
                gpu.matmul16(&la, &lb, &mut c, ta, tb, Epilogue::None, None).unwrap();
                let err = rel_err(&gpu.read_f32(&c).unwrap(), &want);
                let tol = if out == DType::F32 { 1e-5 } else { 1e-3 };
                assert!(err <= tol, "gpu coop matmul {:?} ta={ta} tb={tb} into {}: rel err {err:.2e} > {tol:.0e}", (m, n, k), out.name());
            }
        }
        for (shape, ta, tb) in [((300, 66, 70), false, false), ((257, 96, 33), true, true), ((129, 34, 200), false, true)] {
            let (m, n, k) = shape;
            let a: Vec<f32> = random(m * k, 13, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let bm: Vec<f32> = random(k * n, 14, -1.0, 1.0).iter().map(|&v| float16::round(dt, v)).collect();
            let bias: Vec<f32> = random(n, 15, -0.5, 0.5);
            let mut want = reference(&a, &bm, shape, ta, tb);
            for (i, w) in want.iter_mut().enumerate() {
                *w = (*w + bias[i % n] as f64).max(0.0);
            }
            let mut la = gpu.zeros(if ta { [k, m] } else { [m, k] }, dt, M::Inputs).unwrap();
            let mut lb = gpu.zeros(if tb { [n, k] } else { [k, n] }, dt, M::Inputs).unwrap();
            gpu.write_f32(&mut la, &a).unwrap();
            gpu.write_f32(&mut lb, &bm).unwrap();
            let bias = gpu.upload_f32(&bias, [1, n], M::Parameters).unwrap();
            let mut c = gpu.zeros([m, n], dt, M::Activations).unwrap();
            gpu.fill(&mut c, f32::NAN).unwrap();
            let mut stats = gpu.zeros([1, 2], DType::U32, M::Other).unwrap();
            gpu.matmul16(&la, &lb, &mut c, ta, tb, Epilogue::Bias { bias: &bias, relu: true }, Some(&mut stats)).unwrap();
            let got = gpu.read_f32(&c).unwrap();
            let err = rel_err(&got, &want);
            assert!(err <= 1e-3, "coop {shape:?} ta={ta} tb={tb} bias+relu: rel err {err:.2e}");
            // Each nonzero sum is counted once, kept or flushed: no tile is stored twice.
            let [counted, flushed] = gpu.read_u32(&stats).unwrap()[..] else { panic!("two stats words") };
            let kept = got.iter().filter(|g| **g != 0.0).count() as u32;
            assert_eq!(counted, kept + flushed, "coop {shape:?}: each output counted once");
        }
        for shape in [(70, 98, 66), (33, 130, 40)] {
            let want = fused_ops(&mut CpuBackend::new(), dt, shape);
            let got = fused_ops(gpu, dt, shape);
            let names = ["bias+relu", "relu mask", "sum_cols", "stats", "unscale", "found (finite)", "found (inf)"];
            for ((g, w), what) in got.iter().zip(&want).zip(names) {
                crate::common::assert_close(
                    &format!("gpu coop f16 {shape:?} {what}"),
                    g,
                    w,
                    if what == "stats" || what.starts_with("found") { 0.0 } else { 2e-2 },
                );
            }
        }
        // The tuning's own agreement check admits it (a disagreeing kernel would time +inf).
        let timings = tuning::measure16(gpu, dt, 256, 1).unwrap();
        assert!(timings.iter().any(|&(v, s)| v == Matmul16Variant::Coop && s.is_finite()), "{timings:?}");
        gpu.set_matmul16_choice(DType::F16, chosen);
    });
}

fn digits(amp: AmpConfig) -> TrainConfig {
    TrainConfig { hidden: vec![128, 64], batch: 32, epochs: 12, lr: 0.05, log_every: 10, amp, ..TrainConfig::default() }
}

fn check_training<B: Backend>(b: &mut B, name: &str) {
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    b.reset_memory_peaks();
    let fp32 = train(b, &data, &digits(AmpConfig::default()), &mut NullSink).unwrap();
    for p in [Precision::F16, Precision::BF16] {
        if !runs_16bit(b, p.dtype16().unwrap(), name) {
            continue;
        }
        b.reset_memory_peaks();
        let r = train(b, &data, &digits(AmpConfig::new(p)), &mut NullSink).unwrap();
        let d = (r.final_val_accuracy - fp32.final_val_accuracy) * 100.0;
        let a = r.amp.as_ref().unwrap();
        eprintln!(
            "{name} {}: {:.2}% vs FP32 {:.2}%, skipped {}, flushed {}/{}",
            p.name(),
            r.final_val_accuracy * 100.0,
            fp32.final_val_accuracy * 100.0,
            a.skipped_steps.len(),
            a.grad_elements_flushed,
            a.grad_elements_nonzero
        );
        assert!(
            d.abs() <= 1.5,
            "{name} {}: {:.2}% vs FP32 {:.2}%",
            p.name(),
            r.final_val_accuracy * 100.0,
            fp32.final_val_accuracy * 100.0
        );
        let amp = r.amp.as_ref().expect("a mixed-precision run reports its scaler");
        assert_eq!(amp.scale_history.is_empty(), p == Precision::BF16, "{name}: BF16 runs unscaled, FP16 scaled");
        let act = |r: &gpulab::train::TrainReport| r.memory.categories.iter().find(|c| c.0 == M::Activations).unwrap().2;
        assert!(act(&r) < act(&fp32), "{name} {}: 16-bit activations must take less memory", p.name());
    }
}

#[test]
fn digits_in_fp16_and_bf16_within_1_5_points_of_fp32_on_cpu() {
    check_training(&mut CpuBackend::new(), "cpu");
}

#[test]
fn digits_in_fp16_and_bf16_within_1_5_points_of_fp32_on_gpu() {
    with_gpu("digits_in_fp16_and_bf16_within_1_5_points_of_fp32_on_gpu", |gpu| check_training(gpu, "gpu"));
}

#[test]
fn digits_in_fp16_and_bf16_within_1_5_points_of_fp32_on_cuda() {
    crate::common::cuda::with("digits_in_fp16_and_bf16_within_1_5_points_of_fp32_on_cuda", |c| check_training(c, "cuda"));
}

mod grad_scaler {
    use gpulab::nn::{GradScaler, GradScalerConfig, GradScalerState, ScalerStep};

    fn scaler(growth_interval: u32) -> GradScaler {
        GradScaler::new(GradScalerConfig { growth_interval, ..GradScalerConfig::default() }).unwrap()
    }

    #[test]
    fn defaults_are_pytorchs() {
        let c = GradScalerConfig::default();
        assert_eq!((c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval), (65536.0, 2.0, 0.5, 2000));
        let s = GradScaler::new(c).unwrap();
        assert_eq!(s.scale(), 65536.0);
        assert_eq!(s.inv_scale(), 1.0 / 65536.0);
    }

    #[test]
    fn grows_after_the_interval_of_finite_steps() {
        let mut s = scaler(2000);
        for _ in 0..1999 {
            assert_eq!(s.update(false), ScalerStep::Stepped);
        }
        assert_eq!(s.scale(), 65536.0);
        assert_eq!(s.update(false), ScalerStep::Grew);
        assert_eq!(s.state, GradScalerState { scale: 131072.0, growth_tracker: 0 });
    }

    #[test]
    fn overflow_skips_backs_off_and_restarts_the_interval() {
        let mut s = scaler(3);
        s.update(false);
        s.update(false);
        assert_eq!(s.update(true), ScalerStep::Skipped);
        assert_eq!(s.state, GradScalerState { scale: 32768.0, growth_tracker: 0 });
        // The interval counts again from the skipped step.
        assert_eq!(s.update(false), ScalerStep::Stepped);
        assert_eq!(s.update(false), ScalerStep::Stepped);
        assert_eq!(s.update(false), ScalerStep::Grew);
        assert_eq!(s.scale(), 65536.0);
    }

    #[test]
    fn never_backs_off_below_the_floor_nor_grows_to_inf() {
        let mut s = scaler(1);
        for _ in 0..100 {
            assert_eq!(s.update(true), ScalerStep::Skipped);
        }
        assert_eq!(s.scale(), s.config.min_scale);
        let mut s = GradScaler::new(GradScalerConfig { init_scale: f32::MAX, growth_interval: 1, ..GradScalerConfig::default() }).unwrap();
        assert_eq!(s.update(false), ScalerStep::Stepped, "growing would overflow, so the scale stays");
        assert_eq!(s.scale(), f32::MAX);
    }

    #[test]
    fn bad_configs_are_refused_and_state_round_trips_through_serde() {
        for bad in [
            GradScalerConfig { growth_factor: 1.0, ..GradScalerConfig::default() },
            GradScalerConfig { backoff_factor: 1.5, ..GradScalerConfig::default() },
            GradScalerConfig { growth_interval: 0, ..GradScalerConfig::default() },
            GradScalerConfig { init_scale: f32::NAN, ..GradScalerConfig::default() },
            GradScalerConfig { min_scale: 0.0, ..GradScalerConfig::default() },
        ] {
            assert!(GradScaler::new(bad).is_err(), "{bad:?}");
        }
        let mut s = scaler(5);
        s.update(true);
        s.update(false);
        let json = serde_json::to_string(&s).unwrap();
        let back: GradScaler = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
    }
}

/// An adapter without SHADER_F16 (llvmpipe opened with the feature withheld): FP16 is refused
/// by name, never run in f32 behind the learner's back, while BF16 (plain u32 storage) trains.
#[test]
fn fp16_is_refused_by_name_without_shader_f16_and_bf16_still_trains() {
    use gpulab::device::{GpuBackend, GpuSelector};
    use wgpu::Features;
    let mut g = match GpuBackend::open_withholding(&GpuSelector::Auto, None, Features::SHADER_F16) {
        Ok(g) => g,
        Err(e) => {
            assert!(!crate::common::require_gpu(), "GPULAB_REQUIRE_GPU=1 but no GPU backend could be opened: {e}");
            eprintln!("SKIPPED fp16 without SHADER_F16: no GPU adapter ({e})");
            return;
        }
    };
    assert!(!g.summary().features.iter().any(|f| f == "SHADER_F16"), "{:?}", g.summary().features);
    let why = g.amp_unavailable(DType::F16).expect("fp16 must be unavailable");
    assert!(why.contains("SHADER_F16"), "{why}");
    assert_eq!(g.amp_unavailable(DType::BF16), None);

    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let base = TrainConfig { hidden: vec![16], batch: 64, epochs: 1, ..TrainConfig::default() };
    let fp16 = TrainConfig { amp: AmpConfig::new(Precision::F16), ..base.clone() };
    let err = train(&mut g, &data, &fp16, &mut NullSink).unwrap_err().to_string();
    assert!(err.contains("unavailable") && err.contains("SHADER_F16"), "{err}");
    let bf16 = TrainConfig { amp: AmpConfig::new(Precision::BF16), ..base };
    let r = train(&mut g, &data, &bf16, &mut NullSink).expect("bf16 trains without SHADER_F16");
    assert!(r.final_val_accuracy > 0.5, "{}", r.final_val_accuracy);
}
