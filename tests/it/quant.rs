//! Int8 quantization on every backend: quantize/dequantize round trips within half a step,
//! scales never zero, and the int8 GEMM exact against a naive i32 reference (CPU, both of its
//! kernels) and equal to the CPU's on the GPU, with outputs poisoned first; the GEMM with its
//! dequantize epilogue fused equal bit for bit to the separate ops, on each backend and across.

use gpulab::device::CpuBackend;
use gpulab::tensor::{DType, Dequant, MemCategory as M, QuantGranularity, matmul_i8_dequant_unfused, prelude::*};
use rand::{Rng, SeedableRng};

use crate::common::{backend_tests, cuda, random, with_gpu};

fn random_i8(n: usize, seed: u64) -> Vec<i8> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-128..=127)).collect()
}

fn naive(a: &[i8], b: &[i8], (m, n, k): (usize, usize, usize), ta: bool, tb: bool) -> Vec<i32> {
    let mut c = vec![0i32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).fold(0i32, |s, kk| {
                let x = if ta { a[kk * m + i] } else { a[i * k + kk] } as i32;
                let y = if tb { b[j * k + kk] } else { b[kk * n + j] } as i32;
                s.wrapping_add(x * y)
            });
        }
    }
    c
}

fn i8_tensor<B: Backend>(b: &mut B, data: &[i8], shape: [usize; 2]) -> B::Tensor {
    let mut t = b.zeros(shape, DType::I8, M::Inputs).unwrap();
    b.write_i8(&mut t, data).unwrap();
    t
}

/// op(a)·op(b) on `b`, into an output first filled with another product (the poison).
fn matmul_i8<B: Backend>(be: &mut B, a: &[i8], b: &[i8], (m, n, k): (usize, usize, usize), ta: bool, tb: bool) -> Vec<i32> {
    let at = i8_tensor(be, a, if ta { [k, m] } else { [m, k] });
    let bt = i8_tensor(be, b, if tb { [n, k] } else { [k, n] });
    let mut c = be.zeros([m, n], DType::I32, M::Activations).unwrap();
    let (pa, pb) = (i8_tensor(be, &vec![-77; m], [m, 1]), i8_tensor(be, &vec![91; n], [1, n]));
    be.matmul_i8(&pa, &pb, &mut c, false, false).unwrap();
    assert!(m * n == 0 || be.read_i32(&c).unwrap()[0] == -77 * 91, "the poison landed");
    be.matmul_i8(&at, &bt, &mut c, ta, tb).unwrap();
    be.read_i32(&c).unwrap()
}

const SHAPES: [(usize, usize, usize); 8] =
    [(1, 1, 1), (3, 5, 7), (17, 33, 9), (32, 64, 64), (65, 31, 129), (3, 200, 7), (130, 1, 70), (7, 9, 1)];

#[test]
fn cpu_int8_gemm_is_exact_on_both_kernels() {
    let mut cpu = CpuBackend::new();
    eprintln!("int8 kernel: {:?}", cpu.int8_kernel());
    for path in ["detected", "portable", "avx2"] {
        cpu.set_int8_portable(path == "portable");
        if path == "avx2" && !cpu.set_int8_avx2() {
            eprintln!("this CPU lacks AVX2: the AVX2 int8 path is not tested");
            continue;
        }
        let portable = path;
        for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let (a, b) = (random_i8(m * k, s as u64), random_i8(k * n, 100 + s as u64));
                assert_eq!(
                    matmul_i8(&mut cpu, &a, &b, (m, n, k), ta, tb),
                    naive(&a, &b, (m, n, k), ta, tb),
                    "portable={portable} {m}x{n}x{k} ta={ta} tb={tb}"
                );
            }
        }
    }
}

fn int8_gemm_equals_the_cpu_exactly<B: Backend>(gpu: &mut B) {
    let mut cpu = CpuBackend::new();
    for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let (a, b) = (random_i8(m * k, s as u64), random_i8(k * n, 100 + s as u64));
            let want = matmul_i8(&mut cpu, &a, &b, (m, n, k), ta, tb);
            assert_eq!(want, naive(&a, &b, (m, n, k), ta, tb));
            assert_eq!(matmul_i8(gpu, &a, &b, (m, n, k), ta, tb), want, "{} {m}x{n}x{k} ta={ta} tb={tb}", gpu.info().kind.name());
        }
    }
}

backend_tests!(vs_cpu: int8_gemm_equals_the_cpu_exactly);

/// ±127 everywhere (the saturation bounds quantize produces): the largest sums, exact.
#[test]
fn saturated_int8_sums_are_exact_on_every_backend() {
    let (m, n, k) = (5, 36, 1001);
    let a = vec![127i8; m * k];
    let b: Vec<i8> = (0..k * n).map(|i| if i % 3 == 0 { 127 } else { -127 }).collect();
    let want = naive(&a, &b, (m, n, k), false, false);
    let mut cpu = CpuBackend::new();
    assert_eq!(matmul_i8(&mut cpu, &a, &b, (m, n, k), false, false), want);
    let neg = vec![-127i8; k * n];
    assert!(matmul_i8(&mut cpu, &a, &neg, (m, n, k), false, false).iter().all(|&v| v == -127 * 127 * k as i32));
    with_gpu("saturated_int8_sums_are_exact_on_every_backend", |gpu| {
        assert_eq!(matmul_i8(gpu, &a, &b, (m, n, k), false, false), want);
    });
    cuda::with("saturated_int8_sums_are_exact_on_every_backend", |c| assert_eq!(matmul_i8(c, &a, &b, (m, n, k), false, false), want));
}

/// (q, scales, dequantized) of `x` on `b`.
fn quantize<B: Backend>(b: &mut B, x: &[f32], shape: [usize; 2], g: QuantGranularity) -> (Vec<i8>, Vec<f32>, Vec<f32>) {
    let xt = b.upload_f32(x, shape, M::Inputs).unwrap();
    let mut q = b.zeros(shape, DType::I8, M::Parameters).unwrap();
    let scale_shape = if g == QuantGranularity::PerTensor { [1, 1] } else { [1, shape[1]] };
    let mut s = b.upload_f32(&vec![f32::NAN; scale_shape[1]], scale_shape, M::Parameters).unwrap();
    let mut back = b.upload_f32(&vec![f32::NAN; x.len()], shape, M::Activations).unwrap();
    b.quantize(&xt, &mut q, &mut s, g).unwrap();
    b.dequantize(&q, &s, &mut back).unwrap();
    (b.read_i8(&q).unwrap(), b.read_f32(&s).unwrap(), b.read_f32(&back).unwrap())
}

/// Columns of different ranges, one all zero, one with an outlier.
fn weights(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut x = random(rows * cols, seed, -1.0, 1.0);
    for (i, v) in x.iter_mut().enumerate() {
        let c = i % cols;
        *v *= (c + 1) as f32 * 0.37;
        if c == 2 {
            *v = 0.0;
        }
    }
    if cols > 3 {
        x[3] = 40.0;
    }
    x
}

fn check_round_trip(what: &str, x: &[f32], cols: usize, (q, s, back): &(Vec<i8>, Vec<f32>, Vec<f32>)) {
    assert!(s.iter().all(|&s| s > 0.0 && s.is_finite()), "{what}: a scale is zero or not finite: {s:?}");
    for (i, (&v, &r)) in x.iter().zip(back).enumerate() {
        let scale = if s.len() == 1 { s[0] } else { s[i % cols] };
        assert!((-127..=127).contains(&q[i]), "{what}[{i}]: {} outside ±127", q[i]);
        assert!((v - r).abs() <= scale * 0.5 * (1.0 + 1e-5), "{what}[{i}]: {v} read back as {r}, more than half a step ({scale}) off");
        if v == 0.0 {
            assert_eq!(q[i], 0, "{what}[{i}]: zero must quantize to zero");
        }
    }
}

#[test]
fn cpu_quantize_round_trips_within_half_a_step() {
    let mut cpu = CpuBackend::new();
    for &(rows, cols) in &[(1, 1), (7, 5), (33, 17), (128, 64)] {
        let x = weights(rows, cols, 3);
        for g in [QuantGranularity::PerTensor, QuantGranularity::PerChannel] {
            let r = quantize(&mut cpu, &x, [rows, cols], g);
            check_round_trip(&format!("cpu {g:?} {rows}x{cols}"), &x, cols, &r);
            if g == QuantGranularity::PerChannel && cols > 2 {
                assert_eq!(r.1[2], 1.0, "an all-zero channel gets scale 1");
            }
            // The largest |value| of each scale group lands on ±127 exactly.
            assert!(r.0.iter().any(|&q| q.abs() == 127));
        }
    }
    let (q, s, _) = quantize(&mut cpu, &[0.0; 6], [2, 3], QuantGranularity::PerTensor);
    assert_eq!((q, s), (vec![0; 6], vec![1.0]), "an all-zero tensor");
}

fn quantize_matches_the_cpu<B: Backend>(gpu: &mut B) {
    let mut cpu = CpuBackend::new();
    // The last two are long enough that the GPU splits their absmax over workgroups.
    for &(rows, cols) in &[(1, 1), (7, 5), (33, 17), (300, 10), (2001, 7), (1, 9001)] {
        let x = weights(rows, cols, 5);
        for g in [QuantGranularity::PerTensor, QuantGranularity::PerChannel] {
            let what = format!("{} {g:?} {rows}x{cols}", gpu.info().kind.name());
            let want = quantize(&mut cpu, &x, [rows, cols], g);
            let got = quantize(gpu, &x, [rows, cols], g);
            check_round_trip(&what, &x, cols, &got);
            assert_eq!(got.1, want.1, "{what}: scales (max and one multiply are exact)");
            for (i, (&a, &b)) in got.0.iter().zip(&want.0).enumerate() {
                // Only the division may differ in its last bit: a tie can move by one step.
                let s = want.1[if want.1.len() == 1 { 0 } else { i % cols }];
                let t = x[i] / s;
                let near_tie = (t - t.trunc()).abs() - 0.5;
                assert!(a == b || ((a as i32 - b as i32).abs() == 1 && near_tie.abs() < 1e-4), "{what}[{i}]: gpu {a}, cpu {b} ({t})");
            }
            crate::common::assert_close(&what, &got.2, &want.2, 0.0);
        }
    }
}

backend_tests!(vs_cpu: quantize_matches_the_cpu);

#[test]
fn dequantize_of_i32_accumulators_matches_on_every_backend() {
    let (m, n, k) = (9, 13, 40);
    let (a, b) = (random_i8(m * k, 1), random_i8(k * n, 2));
    let scales = random(n, 3, 0.001, 0.01);
    let acc = naive(&a, &b, (m, n, k), false, false);
    let want: Vec<f32> = acc.iter().enumerate().map(|(i, &v)| v as f32 * scales[i % n]).collect();
    fn run<B: Backend>(be: &mut B, a: &[i8], b: &[i8], scales: &[f32], (m, n, k): (usize, usize, usize)) -> Vec<f32> {
        let (at, bt) = (i8_tensor(be, a, [m, k]), i8_tensor(be, b, [k, n]));
        let mut c = be.zeros([m, n], DType::I32, M::Activations).unwrap();
        be.matmul_i8(&at, &bt, &mut c, false, false).unwrap();
        let s = be.upload_f32(scales, [1, n], M::Parameters).unwrap();
        let mut out = be.upload_f32(&vec![f32::NAN; m * n], [m, n], M::Activations).unwrap();
        be.dequantize(&c, &s, &mut out).unwrap();
        be.read_f32(&out).unwrap()
    }
    assert_eq!(run(&mut CpuBackend::new(), &a, &b, &scales, (m, n, k)), want);
    with_gpu("dequantize_of_i32_accumulators_matches_on_every_backend", |gpu| {
        assert_eq!(run(gpu, &a, &b, &scales, (m, n, k)), want);
    });
    cuda::with("dequantize_of_i32_accumulators_matches_on_every_backend", |c| assert_eq!(run(c, &a, &b, &scales, (m, n, k)), want));
}

#[test]
fn i8_tensors_round_trip_through_host_writes() {
    let data = random_i8(4 * 7 + 3, 9); // not a multiple of 4 elements
    let mut cpu = CpuBackend::new();
    let t = i8_tensor(&mut cpu, &data, [1, data.len()]);
    assert_eq!(cpu.read_i8(&t).unwrap(), data);
    fn round_trip<B: Backend>(be: &mut B, data: &[i8]) -> Vec<i8> {
        let t = i8_tensor(be, data, [1, data.len()]);
        be.read_i8(&t).unwrap()
    }
    with_gpu("i8_tensors_round_trip_through_host_writes", |gpu| assert_eq!(round_trip(gpu, &data), data));
    cuda::with("i8_tensors_round_trip_through_host_writes", |c| assert_eq!(round_trip(c, &data), data));
}

#[test]
fn the_ledger_counts_int8_at_a_quarter_of_f32() {
    let mut cpu = CpuBackend::new();
    let f = cpu.zeros([64, 96], DType::F32, M::Parameters).unwrap();
    let f32_bytes = cpu.memory().total_current;
    let q = cpu.zeros([64, 96], DType::I8, M::Parameters).unwrap();
    assert_eq!((f32_bytes, cpu.memory().total_current - f32_bytes), (64 * 96 * 4, 64 * 96));
    drop((f, q));
    assert_eq!(cpu.memory().total_current, 0);
}

/// Static quantization with calibrated scales: values beyond the range saturate at ±127, and
/// the GPU agrees with the CPU (up to a tie moved by the division's last bit).
#[test]
fn quantize_with_given_scales_saturates_beyond_the_range() {
    let x: Vec<f32> = random(5 * 7, 21, -3.0, 3.0);
    let scales: Vec<f32> = (0..7).map(|c| 0.01 + 0.004 * c as f32).collect(); // ranges 1.27..4.8
    fn run<B: Backend>(be: &mut B, x: &[f32], scales: &[f32]) -> Vec<i8> {
        let xt = be.upload_f32(x, [5, 7], M::Inputs).unwrap();
        let s = be.upload_f32(scales, [1, 7], M::Parameters).unwrap();
        let mut q = be.zeros([5, 7], DType::I8, M::Activations).unwrap();
        be.write_i8(&mut q, &[99; 35]).unwrap(); // poison
        be.quantize_with(&xt, &mut q, &s).unwrap();
        be.read_i8(&q).unwrap()
    }
    let want: Vec<i8> = x.iter().enumerate().map(|(i, &v)| gpulab::tensor::quantize_value(v, scales[i % 7])).collect();
    assert!(want.iter().any(|&q| q.abs() == 127), "some values lie beyond a calibrated range");
    let cpu = run(&mut CpuBackend::new(), &x, &scales);
    assert_eq!(cpu, want);
    let check = |got: Vec<i8>| {
        let moved = got.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert!(got.iter().zip(&want).all(|(&a, &b)| (a as i32 - b as i32).abs() <= 1) && moved <= 1, "gpu {got:?}\ncpu {want:?}");
    };
    with_gpu("quantize_with_given_scales_saturates_beyond_the_range", |gpu| check(run(gpu, &x, &scales)));
    cuda::with("quantize_with_given_scales_saturates_beyond_the_range", |c| check(run(c, &x, &scales)));
}

/// The CPU's vectorised quantize (AVX-512 or AVX2 where the CPU has them, 16 values a step and
/// a scalar tail) gives exactly `quantize_value`'s bytes: odd widths, per-tensor and
/// per-column scales, ties, values far beyond the range, ±0, ±∞ and NaN, output poisoned first.
#[test]
fn cpu_vectorised_quantize_equals_the_scalar_rule_on_odd_shapes_and_special_values() {
    let mut cpu = CpuBackend::new();
    let specials = [0.5, -0.5, 1.5, -2.5, 126.5, -126.5, 127.49, 1e30, -1e30, 0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40];
    for (rows, cols) in [(1, 1), (3, 15), (2, 16), (5, 17), (7, 33), (64, 784), (1, 1000)] {
        let mut x = random(rows * cols, (rows * 31 + cols) as u64, -3.0, 3.0);
        for (i, v) in specials.iter().enumerate() {
            if let Some(slot) = x.get_mut(i * 7 % (rows * cols)) {
                *slot = *v;
            }
        }
        let per_col: Vec<f32> = (0..cols).map(|j| if j % 5 == 0 { 1.0 } else { 0.01 + j as f32 * 0.003 }).collect();
        for scales in [vec![1.0f32 / 127.0 * 3.0], vec![1.0], per_col] {
            let xt = cpu.upload_f32(&x, [rows, cols], M::Inputs).unwrap();
            let st = cpu.upload_f32(&scales, [1, scales.len()], M::Other).unwrap();
            let mut q = cpu.zeros([rows, cols], DType::I8, M::Activations).unwrap();
            cpu.write_i8(&mut q, &vec![99; rows * cols]).unwrap();
            cpu.quantize_with(&xt, &mut q, &st).unwrap();
            let got = cpu.read_i8(&q).unwrap();
            for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                let s = if scales.len() == 1 { scales[0] } else { scales[i % cols] };
                assert_eq!(g, gpulab::tensor::quantize_value(v, s), "[{rows}x{cols}] element {i}: x = {v}, scale {s}");
            }
        }
    }
}

/// Odd shapes for the fused epilogue: 1, 7, 33, 65 are not multiples of the GPU's 4×4 register
/// block or 32×32 workgroup tile, nor of the CPU's 4-row / 64-column VNNI tile; k = 33 and 65
/// leave a partial group of four.
const FUSED_SHAPES: [(usize, usize, usize); 8] =
    [(1, 1, 1), (7, 33, 65), (65, 7, 33), (33, 65, 7), (1, 65, 33), (65, 1, 7), (64, 256, 784), (70, 130, 0)];

/// One epilogue setting: per-column scales?, a bias?, ReLU?, a dynamic activation scale on
/// the device (`ACT`, multiplied into the scales)?
type Setting = (bool, bool, bool, bool);

fn settings() -> Vec<Setting> {
    (0..16).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0, i & 8 != 0)).collect()
}

/// The activation scale of the settings that have one.
const ACT: f32 = 0.0213;

/// The f32 bits of op(a)·op(b) finished by the epilogue, fused (`matmul_i8_dequant`) or as the
/// separate ops (`matmul_i8_dequant_unfused`), into an output filled with NaN first.
#[allow(clippy::too_many_arguments)]
fn fused_bits<B: Backend>(
    be: &mut B,
    fused: bool,
    a: &[i8],
    b: &[i8],
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    (per_col, with_bias, relu, act): Setting,
    seed: u64,
) -> Vec<u32> {
    let at = i8_tensor(be, a, if ta { [k, m] } else { [m, k] });
    let bt = i8_tensor(be, b, if tb { [n, k] } else { [k, n] });
    let scales = if per_col { random(n, seed, 1e-4, 2e-2) } else { vec![3.7e-3] };
    let st = be.upload_f32(&scales, [1, scales.len()], M::Parameters).unwrap();
    let bias = be.upload_f32(&random(n, seed + 1, -3.0, 3.0), [1, n], M::Parameters).unwrap();
    let mut out = be.upload_f32(&vec![f32::NAN; m * n], [m, n], M::Activations).unwrap();
    let act_t = be.upload_f32(&[ACT], [1, 1], M::Activations).unwrap();
    let epi = Dequant { scales: &st, bias: with_bias.then_some(&bias), relu, act_scale: act.then_some(&act_t) };
    if fused {
        be.matmul_i8_dequant(&at, &bt, &mut out, ta, tb, epi).unwrap();
    } else {
        matmul_i8_dequant_unfused(be, &at, &bt, &mut out, ta, tb, epi).unwrap();
    }
    be.read_f32(&out).unwrap().iter().map(|v| v.to_bits()).collect()
}

/// Every shape, transpose pair and epilogue setting: `check(what, case)` for each.
fn each_fused_case(mut check: impl FnMut(&str, &[i8], &[i8], (usize, usize, usize), (bool, bool), Setting, u64)) {
    for (s, &(m, n, k)) in FUSED_SHAPES.iter().enumerate() {
        // −127..127 as quantize produces (the GEMM itself is exact on −128 too).
        let (a, b) = (
            random_i8(m * k, 40 + s as u64).iter().map(|&v| v.max(-127)).collect::<Vec<_>>(),
            random_i8(k * n, 80 + s as u64).iter().map(|&v| v.max(-127)).collect::<Vec<_>>(),
        );
        let transposes: &[(bool, bool)] =
            if m * n * k > 100_000 { &[(false, false)] } else { &[(false, false), (true, false), (false, true), (true, true)] };
        for &t in transposes {
            for set in settings() {
                let what = format!("{m}x{n}x{k} ta={} tb={} per_col={} bias={} relu={} act={}", t.0, t.1, set.0, set.1, set.2, set.3);
                check(&what, &a, &b, (m, n, k), t, set, s as u64);
            }
        }
    }
}

#[test]
fn cpu_fused_int8_epilogue_equals_the_separate_ops_bit_for_bit() {
    let mut cpu = CpuBackend::new();
    for path in ["detected", "portable", "avx2"] {
        cpu.set_int8_portable(path == "portable");
        if path == "avx2" && !cpu.set_int8_avx2() {
            eprintln!("this CPU lacks AVX2: the AVX2 int8 path is not tested");
            continue;
        }
        let mut relu_cut = 0;
        each_fused_case(|what, a, b, dims, t, set, seed| {
            let want = fused_bits(&mut cpu, false, a, b, dims, t, set, seed);
            let got = fused_bits(&mut cpu, true, a, b, dims, t, set, seed);
            assert_eq!(got, want, "cpu {path} {what}");
            // And both equal the three f32 steps on the exact sums, done here.
            let (m, n, k) = dims;
            let acc = naive(a, b, dims, t.0, t.1);
            let scales = if set.0 { random(n, seed, 1e-4, 2e-2) } else { vec![3.7e-3] };
            let bias = random(n, seed + 1, -3.0, 3.0);
            let host: Vec<u32> = acc
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    // s_x · s_W[col] formed first, as the host does for the separate ops.
                    let s = scales[if set.0 { i % n } else { 0 }];
                    let mut y = v as f32 * if set.3 { ACT * s } else { s };
                    if set.1 {
                        y += bias[i % n];
                    }
                    if set.2 {
                        relu_cut += (y < 0.0) as usize;
                        y = y.max(0.0);
                    }
                    y.to_bits()
                })
                .collect();
            assert_eq!(got, host, "cpu {path} {what} vs the host's steps (k = {k}, m = {m})");
        });
        assert!(relu_cut > 0, "some outputs were negative before the ReLU");
    }
}

fn fused_int8_epilogue_equals_the_separate_ops_and_the_cpu<B: Backend>(gpu: &mut B) {
    let mut cpu = CpuBackend::new();
    each_fused_case(|what, a, b, dims, t, set, seed| {
        let want = fused_bits(&mut cpu, true, a, b, dims, t, set, seed);
        assert_eq!(fused_bits(gpu, true, a, b, dims, t, set, seed), want, "fused vs cpu {what}");
        assert_eq!(fused_bits(gpu, false, a, b, dims, t, set, seed), want, "separate ops vs cpu {what}");
    });
}

backend_tests!(vs_cpu: fused_int8_epilogue_equals_the_separate_ops_and_the_cpu);

/// Bad shapes and types are refused with an error that names the problem (no panic), the same
/// on every backend; the output is left alone.
#[test]
fn fused_int8_epilogue_refuses_bad_shapes_with_clear_errors() {
    fn errors<B: Backend>(be: &mut B) -> Vec<String> {
        let a = i8_tensor(be, &[1; 6], [2, 3]);
        let b = i8_tensor(be, &[1; 12], [3, 4]);
        let s1 = be.upload_f32(&[1.0], [1, 1], M::Other).unwrap();
        let s3 = be.upload_f32(&[1.0; 3], [1, 3], M::Other).unwrap();
        let s4 = be.upload_f32(&[1.0; 4], [1, 4], M::Other).unwrap();
        let mut out = be.upload_f32(&[7.0; 8], [2, 4], M::Other).unwrap();
        let mut out_t = be.upload_f32(&[7.0; 8], [4, 2], M::Other).unwrap();
        let mut acc = be.zeros([2, 4], DType::I32, M::Other).unwrap();
        let e = |scales, bias| Dequant { scales, bias, relu: true, act_scale: None };
        let errs = vec![
            be.matmul_i8_dequant(&a, &b, &mut out, false, false, e(&s3, None)),
            be.matmul_i8_dequant(&a, &b, &mut out, false, false, e(&s4, Some(&s3))),
            be.matmul_i8_dequant(&a, &b, &mut out_t, false, false, e(&s1, None)),
            be.matmul_i8_dequant(&a, &a, &mut out, false, false, e(&s1, None)),
            be.matmul_i8_dequant(&a, &b, &mut acc, false, false, e(&s1, None)),
            be.matmul_i8_dequant(&a, &b, &mut out, false, false, Dequant { act_scale: Some(&s4), ..e(&s1, None) }),
        ];
        assert_eq!(be.read_f32(&out).unwrap(), vec![7.0; 8], "a refused call writes nothing");
        errs.into_iter().map(|r| r.expect_err("a bad call must be refused").to_string()).collect()
    }
    let cpu = errors(&mut CpuBackend::new());
    for (err, want) in cpu.iter().zip([
        "scales [1, 3]",
        "bias [1, 3]",
        "output is [4, 2], expected [2, 4]",
        "inner dimensions differ",
        "writes an f32 output, got i32",
        "activation scale is one value, [1, 1], got [1, 4]",
    ]) {
        assert!(err.contains("matmul_i8_dequant") && err.contains(want), "{err:?} should name the op and say {want:?}");
    }
    with_gpu("fused_int8_epilogue_refuses_bad_shapes_with_clear_errors", |gpu| assert_eq!(errors(gpu), cpu));
    cuda::with("fused_int8_epilogue_refuses_bad_shapes_with_clear_errors", |c| assert_eq!(errors(c), cpu));
}
