//! Every GPU kernel against the CPU reference on random inputs, including odd shapes that are
//! not multiples of any workgroup size. Output buffers are poisoned with NaN first, so an
//! element a kernel forgets to write fails the comparison.

use gpulab::device::CpuBackend;
use gpulab::device::gpu::{GpuBackend, MatmulVariant};
use gpulab::tensor::{AdamW, DType, MemCategory as M, Sgd, prelude::*};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use crate::common::{assert_close, backend_tests, random, with_gpu};

const TOL: f32 = 1e-5;

fn nan(n: usize) -> Vec<f32> {
    vec![f32::NAN; n]
}

fn matmul<B: Backend>(
    b: &mut B,
    a: &[f32],
    bm: &[f32],
    c0: &[f32],
    (m, n, k): (usize, usize, usize),
    ta: bool,
    tb: bool,
    acc: bool,
) -> Vec<f32> {
    let a = b.upload_f32(a, if ta { [k, m] } else { [m, k] }, M::Inputs).unwrap();
    let bm = b.upload_f32(bm, if tb { [n, k] } else { [k, n] }, M::Inputs).unwrap();
    let mut c = b.upload_f32(c0, [m, n], M::Activations).unwrap();
    b.matmul(&a, &bm, &mut c, ta, tb, acc).unwrap();
    b.read_f32(&c).unwrap()
}

fn check_matmul(gpu: &mut GpuBackend, variant: MatmulVariant, (m, n, k): (usize, usize, usize), ta: bool, tb: bool, acc: bool, seed: u64) {
    gpu.set_matmul_variant(variant);
    let a = random(m * k, seed, -1.0, 1.0);
    let bm = random(k * n, seed + 1, -1.0, 1.0);
    let c0 = if acc { random(m * n, seed + 2, -1.0, 1.0) } else { nan(m * n) };
    let want = matmul(&mut CpuBackend::new(), &a, &bm, &c0, (m, n, k), ta, tb, acc);
    let got = matmul(gpu, &a, &bm, &c0, (m, n, k), ta, tb, acc);
    assert_close(&format!("matmul {variant:?} {m}x{n}x{k} ta={ta} tb={tb} acc={acc}"), &got, &want, TOL);
}

#[test]
fn matmul_fixed_odd_shapes_all_variants() {
    with_gpu("matmul_fixed_odd_shapes_all_variants", |gpu| {
        let before = gpu.matmul_choice();
        for variant in MatmulVariant::ALL {
            for shape in [(1, 1, 1), (17, 33, 9), (64, 64, 64), (65, 31, 129), (3, 200, 7), (130, 1, 70)] {
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    check_matmul(gpu, variant, shape, ta, tb, false, 11);
                    check_matmul(gpu, variant, shape, ta, tb, true, 12);
                }
            }
        }
        gpu.set_matmul_choice(before);
    });
}

#[test]
fn matmul_random_shapes_property() {
    with_gpu("matmul_random_shapes_property", |gpu| {
        let before = gpu.matmul_choice();
        let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
        // proptest wants an `Fn`; the shared backend is borrowed per case.
        let cell = std::cell::RefCell::new(&mut *gpu);
        let strategy = (1usize..90, 1usize..90, 1usize..90, any::<bool>(), any::<bool>(), any::<bool>(), 0usize..2, any::<u64>());
        runner
            .run(&strategy, |(m, n, k, ta, tb, acc, v, seed)| {
                check_matmul(&mut cell.borrow_mut(), MatmulVariant::ALL[v], (m, n, k), ta, tb, acc, seed);
                Ok(())
            })
            .unwrap();
        gpu.set_matmul_choice(before);
    });
}

/// Runs the same element-wise op sequence on a backend and returns every output.
fn elementwise<B: Backend>(b: &mut B, x: &[f32], y: &[f32], shape: [usize; 2]) -> Vec<Vec<f32>> {
    let n = shape[0] * shape[1];
    let mut out = Vec::new();
    let mut t = b.upload_f32(x, shape, M::Activations).unwrap();
    b.relu(&mut t).unwrap();
    out.push(b.read_f32(&t).unwrap());
    let act = b.upload_f32(y, shape, M::Activations).unwrap();
    let mut g = b.upload_f32(x, shape, M::Gradients).unwrap();
    b.relu_backward(&mut g, &act).unwrap();
    out.push(b.read_f32(&g).unwrap());
    let bias = b.upload_f32(&y[..shape[1]], [1, shape[1]], M::Parameters).unwrap();
    let mut t = b.upload_f32(x, shape, M::Activations).unwrap();
    b.bias_add(&mut t, &bias).unwrap();
    out.push(b.read_f32(&t).unwrap());
    b.scale(&mut t, -0.37).unwrap();
    out.push(b.read_f32(&t).unwrap());
    let addend = b.upload_f32(y, shape, M::Gradients).unwrap();
    b.add_to(&addend, &mut t).unwrap();
    out.push(b.read_f32(&t).unwrap());
    let mut dst = b.upload_f32(&nan(n), shape, M::Activations).unwrap();
    b.copy(&t, &mut dst).unwrap();
    out.push(b.read_f32(&dst).unwrap());
    b.fill(&mut dst, 2.5).unwrap();
    out.push(b.read_f32(&dst).unwrap());
    let z = b.zeros(shape, DType::F32, M::Other).unwrap();
    out.push(b.read_f32(&z).unwrap());
    out
}

fn elementwise_ops_match_cpu<B: Backend>(b: &mut B) {
    for (i, shape) in [[1, 1], [17, 33], [3, 257], [256, 4], [1, 1000]].into_iter().enumerate() {
        let n = shape[0] * shape[1];
        let x = random(n, 100 + i as u64, -2.0, 2.0);
        let y = random(n, 200 + i as u64, -2.0, 2.0);
        let want = elementwise(&mut CpuBackend::new(), &x, &y, shape);
        let got = elementwise(b, &x, &y, shape);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("elementwise op {j} shape {shape:?}"), g, w, TOL);
        }
    }
}

fn u32_fill_copy_and_zeros_keep_bits<B: Backend>(b: &mut B) {
    let data: Vec<u32> = (0..37).map(|i| i * 2_654_435_761u32).collect();
    let src = b.upload_u32(&data, [1, 37], M::Inputs).unwrap();
    let mut dst = b.upload_u32(&[7; 37], [1, 37], M::Inputs).unwrap();
    b.copy(&src, &mut dst).unwrap();
    assert_eq!(b.read_u32(&dst).unwrap(), data);
    b.fill(&mut dst, 5.0).unwrap();
    assert_eq!(b.read_u32(&dst).unwrap(), vec![5; 37]);
    let z = b.zeros([3, 5], DType::U32, M::Other).unwrap();
    assert_eq!(b.read_u32(&z).unwrap(), vec![0; 15]);
}

/// Spills past 65535 workgroups (blocks) in x: wgpu's dispatch uses its y dimension, CUDA's
/// kernels their grid-stride loops.
fn large_elementwise_spills_into_second_dispatch_dimension<B: Backend>(b: &mut B) {
    let n = 65_535 * 256 + 1_000;
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let mut t = b.upload_f32(&x, [1, n], M::Activations).unwrap();
    b.scale(&mut t, 0.5).unwrap();
    let got = b.read_f32(&t).unwrap();
    for i in [0, 1, 65_535 * 256 - 1, 65_535 * 256, n - 1] {
        assert_eq!(got[i], x[i] * 0.5, "element {i}");
    }
    assert!(got.iter().zip(&x).all(|(g, x)| *g == x * 0.5));
}

fn reductions<B: Backend>(b: &mut B, x: &[f32], labels: &[u32], shape: [usize; 2]) -> (Vec<Vec<f32>>, Vec<Vec<u32>>) {
    let [r, c] = shape;
    let xt = b.upload_f32(x, shape, M::Activations).unwrap();
    let mut cols = b.upload_f32(&nan(c), [1, c], M::Gradients).unwrap();
    b.sum_cols(&xt, &mut cols).unwrap();
    let mut rows = b.upload_f32(&nan(r), [1, r], M::Other).unwrap();
    b.sum_rows(&xt, &mut rows).unwrap();
    let mut acc = b.upload_f32(&[1.5, -2.0], [1, 2], M::Other).unwrap();
    b.accumulate_sum(&xt, &mut acc, 1).unwrap();
    b.accumulate_sum(&xt, &mut acc, 1).unwrap();
    let lab = b.upload_u32(labels, [1, r], M::Inputs).unwrap();
    let mut am = b.upload_u32(&vec![u32::MAX; r], [1, r], M::Other).unwrap();
    b.argmax_rows(&xt, &mut am).unwrap();
    let mut correct = b.upload_u32(&[3, 4, 5], [1, 3], M::Other).unwrap();
    b.count_correct(&xt, &lab, &mut correct, 2).unwrap();
    (
        vec![b.read_f32(&cols).unwrap(), b.read_f32(&rows).unwrap(), b.read_f32(&acc).unwrap()],
        vec![b.read_u32(&am).unwrap(), b.read_u32(&correct).unwrap()],
    )
}

fn reductions_match_cpu<B: Backend>(b: &mut B) {
    for (i, shape) in [[1, 1], [17, 33], [300, 10], [5, 700], [1025, 3]].into_iter().enumerate() {
        let [r, c] = shape;
        let x = random(r * c, 300 + i as u64, -1.0, 1.0);
        let labels: Vec<u32> = random(r, 400 + i as u64, 0.0, c as f32).iter().map(|v| *v as u32).collect();
        let (wf, wu) = reductions(&mut CpuBackend::new(), &x, &labels, shape);
        let (gf, gu) = reductions(b, &x, &labels, shape);
        for (j, (g, w)) in gf.iter().zip(&wf).enumerate() {
            // Sums of up to 3500 terms in a different order: allow rounding of that size.
            assert_close(&format!("reduction {j} shape {shape:?}"), g, w, 1e-4);
        }
        assert_eq!(gu, wu, "argmax / correct count, shape {shape:?}");
        assert_eq!(gu[1][..2], [3, 4], "other accumulator slots untouched");
    }
}

fn xent<B: Backend>(b: &mut B, logits: &[f32], labels: &[u32], shape: [usize; 2], scale: f32) -> Vec<Vec<f32>> {
    let [r, c] = shape;
    let l = b.upload_f32(logits, shape, M::Activations).unwrap();
    let y = b.upload_u32(labels, [1, r], M::Inputs).unwrap();
    let mut loss = b.upload_f32(&nan(r), [1, r], M::Activations).unwrap();
    let mut grad = b.upload_f32(&nan(r * c), shape, M::Gradients).unwrap();
    b.softmax_xent(&l, &y, &mut loss, Some(&mut grad), scale).unwrap();
    let mut loss_only = b.upload_f32(&nan(r), [1, r], M::Activations).unwrap();
    b.softmax_xent(&l, &y, &mut loss_only, None, 1.0).unwrap();
    vec![b.read_f32(&loss).unwrap(), b.read_f32(&grad).unwrap(), b.read_f32(&loss_only).unwrap()]
}

fn softmax_cross_entropy_matches_cpu<B: Backend>(b: &mut B) {
    // Up to 64 columns run the thread-per-row kernel, wider rows the workgroup-per-row one.
    for (i, shape) in [[1, 2], [17, 10], [64, 33], [2, 64], [9, 65], [3, 1000], [200, 7]].into_iter().enumerate() {
        let [r, c] = shape;
        // Large logits check the max-subtraction that keeps exp() finite.
        let logits = random(r * c, 500 + i as u64, -30.0, 30.0);
        let labels: Vec<u32> = (0..r).map(|j| (j * 7 % c) as u32).collect();
        let want = xent(&mut CpuBackend::new(), &logits, &labels, shape, 1.0 / r as f32);
        let got = xent(b, &logits, &labels, shape, 1.0 / r as f32);
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("softmax_xent output {j} shape {shape:?}"), g, w, TOL);
        }
    }
}

/// The loss step (`loss_step`: softmax cross-entropy, its gradient, the loss sum and correct
/// count; one dispatch on a GPU for up to 64 classes and a batch of one workgroup) equals the
/// three ops on the CPU, on top of totals already there; rows past a workgroup, wide rows and an
/// out-of-range label included.
fn loss_step_matches_cpu<B: Backend>(b: &mut B) {
    fn run<B: Backend>(b: &mut B, logits: &[f32], labels: &[u32], shape: [usize; 2], grad: bool) -> (Vec<Vec<f32>>, u32) {
        let [r, c] = shape;
        let l = b.upload_f32(logits, shape, M::Activations).unwrap();
        let y = b.upload_u32(labels, [1, r], M::Inputs).unwrap();
        let mut loss = b.upload_f32(&nan(r), [1, r], M::Activations).unwrap();
        let mut g = b.upload_f32(&nan(r * c), shape, M::Gradients).unwrap();
        let mut sum = b.upload_f32(&[1.5], [1, 1], M::Other).unwrap();
        let mut correct = b.upload_u32(&[7], [1, 1], M::Other).unwrap();
        for _ in 0..2 {
            b.loss_step(&l, &y, &mut loss, grad.then_some(&mut g), 0.25, &mut sum, &mut correct).unwrap();
        }
        let out = vec![b.read_f32(&loss).unwrap(), b.read_f32(&g).unwrap(), b.read_f32(&sum).unwrap()];
        (out, b.read_u32(&correct).unwrap()[0])
    }
    for (i, shape) in [[1, 2], [17, 10], [64, 64], [255, 3], [256, 10], [257, 10], [9, 65], [300, 70]].into_iter().enumerate() {
        let [r, c] = shape;
        let logits = random(r * c, 900 + i as u64, -3.0, 3.0);
        let labels: Vec<u32> = (0..r).map(|j| (j * 7 % c) as u32).collect();
        for grad in [true, false] {
            let (want, want_hits) = run(&mut CpuBackend::new(), &logits, &labels, shape, grad);
            let (got, hits) = run(b, &logits, &labels, shape, grad);
            for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(&format!("loss_step output {j} shape {shape:?} grad {grad}"), g, w, TOL);
            }
            assert_eq!(hits, want_hits, "correct count, shape {shape:?}");
        }
    }
    let logits = random(6, 1, -1.0, 1.0);
    let (got, _) = run(b, &logits, &[0, 3], [2, 3], true);
    assert!(got[0][1].is_nan() && got[2][0].is_nan() && !got[0][0].is_nan(), "an out-of-range label's loss is NaN: {got:?}");
}

fn softmax_cross_entropy_out_of_range_label_is_nan_on_both<B: Backend>(b: &mut B) {
    let logits = random(6, 1, -1.0, 1.0);
    let want = xent(&mut CpuBackend::new(), &logits, &[0, 3], [2, 3], 1.0);
    let got = xent(b, &logits, &[0, 3], [2, 3], 1.0);
    assert!(want[0][1].is_nan() && got[0][1].is_nan());
    assert!(!got[0][0].is_nan());
}

fn optim<B: Backend>(b: &mut B, p0: &[f32], g0: &[f32], shape: [usize; 2]) -> Vec<Vec<f32>> {
    let n = shape[0] * shape[1];
    let g = b.upload_f32(g0, shape, M::Gradients).unwrap();
    let mut p = b.upload_f32(p0, shape, M::Parameters).unwrap();
    let mut v = b.zeros(shape, DType::F32, M::OptimizerState).unwrap();
    let sgd = Sgd { lr: 0.1, momentum: 0.9, weight_decay: 1e-3 };
    for _ in 0..3 {
        b.sgd_step(&mut p, &g, &mut v, sgd).unwrap();
    }
    let mut out = vec![b.read_f32(&p).unwrap(), b.read_f32(&v).unwrap()];
    let mut p = b.upload_f32(p0, shape, M::Parameters).unwrap();
    let mut m1 = b.upload_f32(&vec![0.0; n], shape, M::OptimizerState).unwrap();
    let mut m2 = b.upload_f32(&vec![0.0; n], shape, M::OptimizerState).unwrap();
    let adam = AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    for step in 1..=3 {
        b.adamw_step(&mut p, &g, &mut m1, &mut m2, adam, step).unwrap();
    }
    out.extend([b.read_f32(&p).unwrap(), b.read_f32(&m1).unwrap(), b.read_f32(&m2).unwrap()]);
    out
}

fn optimizer_updates_match_cpu<B: Backend>(b: &mut B) {
    for (i, shape) in [[1, 1], [17, 33], [257, 3]].into_iter().enumerate() {
        let n = shape[0] * shape[1];
        let p = random(n, 600 + i as u64, -1.0, 1.0);
        let g = random(n, 700 + i as u64, -0.5, 0.5);
        let want = optim(&mut CpuBackend::new(), &p, &g, shape);
        let got = optim(b, &p, &g, shape);
        for (j, (gv, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("optimizer output {j} shape {shape:?}"), gv, w, TOL);
        }
    }
}

/// Mistakes in shapes are errors on every backend, never panics or silent garbage.
fn shape_mismatches_are_errors<B: Backend>(b: &mut B) {
    let a = b.zeros([2, 3], DType::F32, M::Other).unwrap();
    let w = b.zeros([4, 5], DType::F32, M::Other).unwrap();
    let mut c = b.zeros([2, 5], DType::F32, M::Other).unwrap();
    let e = b.matmul(&a, &w, &mut c, false, false, false).unwrap_err();
    assert!(e.to_string().contains("inner dimensions"), "{e}");
    let labels = b.zeros([1, 2], DType::F32, M::Other).unwrap();
    let mut loss = b.zeros([1, 2], DType::F32, M::Other).unwrap();
    assert!(b.softmax_xent(&a, &labels, &mut loss, None, 1.0).is_err(), "f32 labels must be refused");
    assert!(b.upload_f32(&[1.0; 5], [2, 3], M::Other).is_err());
}

/// A backend with one GEMM (CUDA's cuBLAS) against the CPU on odd shapes and every transpose
/// and accumulate combination; the wgpu variants have their own tests above.
fn matmul_odd_shapes_match_cpu<B: Backend>(b: &mut B) {
    for (i, (m, n, k)) in
        [(1, 1, 1), (17, 33, 9), (64, 64, 64), (65, 31, 129), (3, 200, 7), (130, 1, 70), (5, 4, 0)].into_iter().enumerate()
    {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for acc in [false, true] {
                let seed = 40 + i as u64;
                let a = random(m * k, seed, -1.0, 1.0);
                let bm = random(k * n, seed + 1, -1.0, 1.0);
                let c0 = if acc { random(m * n, seed + 2, -1.0, 1.0) } else { nan(m * n) };
                let want = matmul(&mut CpuBackend::new(), &a, &bm, &c0, (m, n, k), ta, tb, acc);
                let got = matmul(b, &a, &bm, &c0, (m, n, k), ta, tb, acc);
                assert_close(&format!("matmul {m}x{n}x{k} ta={ta} tb={tb} acc={acc}"), &got, &want, TOL);
            }
        }
    }
}

// Comparisons with the CPU run on the GPU backends; self-checking tests run everywhere.
backend_tests!(vs_cpu: elementwise_ops_match_cpu, large_elementwise_spills_into_second_dispatch_dimension, reductions_match_cpu, softmax_cross_entropy_matches_cpu, softmax_cross_entropy_out_of_range_label_is_nan_on_both, loss_step_matches_cpu, optimizer_updates_match_cpu);
// The wgpu backend's matmul variants have their own tests above; the CPU is the reference.
backend_tests!([cuda] matmul_odd_shapes_match_cpu);
backend_tests!(every: u32_fill_copy_and_zeros_keep_bits, shape_mismatches_are_errors);
