//! Optimizer conformance (issue 32): one update of SGD (momentum, weight decay) and AdamW, as
//! `sgd_step`/`adamw_step` and as the mixed-precision `amp_update`, from the same random
//! parameters, gradients and optimizer state, on each backend against the CPU reference, element
//! by element in ulps. Each language has one definition of each formula (device/cpu/optim.rs,
//! shaders/optimizer_math.wgsl, shaders/cuda/optimizer.cuh) with the same operations in the same
//! order; what may still differ is how each compiler rounds them.
//!
//! The bound. An error is measured in ulps of the largest magnitude S in the element's formula
//! (the result and every summand and product that flows into it, scaled as it flows), because a
//! GPU compiler may contract `a·b + c` into one fused multiply-add — WGSL does not forbid it and
//! NVRTC does it by default (`--fmad=true`) — which skips the product's rounding: small against S,
//! but any number of ulps of a result that cancels (p ≈ lr·v). Each rounding is off by at most
//! ½ ulp(S) (every intermediate is at most S); an error carried into a later result through a
//! factor below 1 (lr, a moment's step) at most doubles counted in that result's S (a binade may
//! separate the two). The CPU and a backend each err so; their difference is at most the sum:
//! - SGD's v: the CPU rounds wd·p, g + ·, μ·v and the sum: 2 ulps; a backend no more: 4 ulps.
//! - SGD's p: v's 2 ulps carried through lr (4), then lr·v and p − · (1): 5 per side, 10.
//! - AdamW's m and v: 3 and 4 roundings: at most 4 ulps.
//! - AdamW's p: on the CPU m's 1.5 ulps scaled (3), √, / and + ε in the denominator (3),
//!   step·m and the division (2), p·decay and the subtraction (1): 9. WGSL only promises x / y
//!   and √x within 2.5 ulps, so a conforming adapter may err (2 more) × 3 × 2 = 12 more: 21.
//!   Together 30.
//!
//! An adapter that rounds each operation as IEEE 754 and contracts nothing matches the CPU bit for
//! bit (llvmpipe does); `a_contracting_compiler_stays_within_the_bound` checks the bound against
//! every multiply-add contracted, emulated on the host with `mul_add`.

use gpulab::device::CpuBackend;
use gpulab::tensor::scaler::{self, AmpOptimizer};
use gpulab::tensor::{AdamW, Backend, DType, MemCategory as M, Sgd};

use crate::common::{backend_tests, random};

/// Ulps of the largest term, per output (see the module's comment).
const STATE_ULPS: f64 = 4.0;
const SGD_P_ULPS: f64 = 10.0;
const ADAMW_P_ULPS: f64 = 30.0;

/// Element counts: one, either side of the 256-wide workgroup, odd (the mixed-precision kernel
/// takes two elements per invocation), and over the CPU's parallel threshold (2^15).
const LENGTHS: [usize; 5] = [1, 255, 257, 1003, 40_001];
const SGD: Sgd = Sgd { lr: 0.05, momentum: 0.9, weight_decay: 1e-2 };
const ADAMW: AdamW = AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 1e-2 };
/// AdamW's step (its bias corrections): not the first, so they are not trivially 1 − β.
const STEP: u32 = 7;

/// The random starting point of one update.
struct Start {
    p: Vec<f32>,
    g: Vec<f32>,
    /// SGD's velocity and AdamW's first moment.
    s1: Vec<f32>,
    /// AdamW's second moment (non-negative).
    s2: Vec<f32>,
}

impl Start {
    fn new(n: usize, seed: u64) -> Self {
        Start {
            p: random(n, seed, -1.0, 1.0),
            g: random(n, seed + 1, -0.5, 0.5),
            s1: random(n, seed + 2, -0.2, 0.2),
            s2: random(n, seed + 3, 0.0, 0.01),
        }
    }
}

/// Which update runs.
#[derive(Clone, Copy, Debug)]
enum Update {
    Sgd,
    AdamW,
    AmpSgd,
    AmpAdamW,
}

impl Update {
    const ALL: [Update; 4] = [Update::Sgd, Update::AdamW, Update::AmpSgd, Update::AmpAdamW];

    fn adam(self) -> bool {
        matches!(self, Update::AdamW | Update::AmpAdamW)
    }
}

/// [p, s1, (s2)] after one update on `b`.
fn run<B: Backend>(b: &mut B, u: Update, s: &Start) -> Vec<Vec<f32>> {
    let shape = [1, s.p.len()];
    let mut p = b.upload_f32(&s.p, shape, M::Parameters).unwrap();
    let g = b.upload_f32(&s.g, shape, M::Gradients).unwrap();
    let mut slots = vec![b.upload_f32(&s.s1, shape, M::OptimizerState).unwrap()];
    if u.adam() {
        slots.push(b.upload_f32(&s.s2, shape, M::OptimizerState).unwrap());
    }
    match u {
        Update::Sgd => b.sgd_step(&mut p, &g, &mut slots[0], SGD).unwrap(),
        Update::AdamW => {
            let [m, v] = slots.as_mut_slice() else { unreachable!() };
            b.adamw_step(&mut p, &g, m, v, ADAMW, STEP).unwrap()
        }
        Update::AmpSgd | Update::AmpAdamW => {
            // No overflow, and the on-device step count that picks AdamW's factors for STEP.
            let mut state = b.zeros([1, scaler::STATE_WORDS], DType::U32, M::Other).unwrap();
            b.write_u32(&mut state, &scaler::state_words(1.0, 0, STEP - 1)).unwrap();
            let mut table = b.zeros([1, 2 * STEP as usize], DType::F32, M::OptimizerState).unwrap();
            b.write_f32(&mut table, &scaler::adam_factor_table(ADAMW, STEP as usize)).unwrap();
            let opt = if u.adam() { AmpOptimizer::AdamW(ADAMW, &table) } else { AmpOptimizer::Sgd(SGD) };
            b.amp_update(&mut p, &g, &mut slots, opt, &state, None).unwrap();
        }
    }
    std::iter::once(&p).chain(&slots).map(|t| b.read_f32(t).unwrap()).collect()
}

/// The largest magnitude in each output's formula, element by element (f64, from the start and
/// the reference's results): [p, s1, (s2)].
fn scales(u: Update, s: &Start, want: &[Vec<f32>]) -> Vec<Vec<f64>> {
    let n = s.p.len();
    let (p, g, s1, s2) = (|i: usize| s.p[i] as f64, |i: usize| s.g[i] as f64, |i: usize| s.s1[i] as f64, |i: usize| s.s2[i] as f64);
    if !u.adam() {
        let (lr, mu, wd) = (SGD.lr as f64, SGD.momentum as f64, SGD.weight_decay as f64);
        let sv: Vec<f64> = (0..n)
            .map(|i| [(mu * s1(i)).abs(), g(i).abs(), (wd * p(i)).abs(), (want[1][i] as f64).abs()].into_iter().fold(0.0, f64::max))
            .collect();
        let sp = (0..n).map(|i| p(i).abs().max(lr * sv[i]).max((want[0][i] as f64).abs())).collect();
        return vec![sp, sv];
    }
    let f = ADAMW.factors(STEP);
    let (b1, b2) = (ADAMW.beta1 as f64, ADAMW.beta2 as f64);
    let sm: Vec<f64> = (0..n)
        .map(|i| [(b1 * s1(i)).abs(), ((1.0 - b1) * g(i)).abs(), (want[1][i] as f64).abs()].into_iter().fold(0.0, f64::max))
        .collect();
    let sv = (0..n).map(|i| (b2 * s2(i)).max((1.0 - b2) * g(i) * g(i)).max(want[2][i] as f64)).collect();
    let sp = (0..n)
        .map(|i| {
            let den = (want[2][i] as f64).sqrt() / f.bias2_sqrt as f64 + ADAMW.eps as f64;
            [p(i).abs(), (p(i) * f.decay as f64).abs(), f.step_size as f64 * sm[i] / den, (want[0][i] as f64).abs()]
                .into_iter()
                .fold(0.0, f64::max)
        })
        .collect();
    vec![sp, sm, sv]
}

/// The f32 spacing at magnitude `x` (the smallest subnormal at 0).
fn ulp(x: f64) -> f64 {
    let x = (x as f32).abs();
    if x == f32::MAX {
        return (x - f32::from_bits(x.to_bits() - 1)) as f64;
    }
    (f32::from_bits(x.to_bits() + 1) - x) as f64
}

/// The worst error of `got` against the CPU's `want` per output, in ulps of each element's scale;
/// panics past the bound.
fn compare(who: &str, u: Update, start: &Start, got: &[Vec<f32>], want: &[Vec<f32>]) -> [f64; 3] {
    let mut worst = [0.0f64; 3];
    let n = start.p.len();
    for (j, ((got, want), scale)) in got.iter().zip(want).zip(scales(u, start, want)).enumerate() {
        let bound = match (j, u.adam()) {
            (0, false) => SGD_P_ULPS,
            (0, true) => ADAMW_P_ULPS,
            _ => STATE_ULPS,
        };
        assert_eq!(got.len(), n, "{who} {u:?}: output {j} length");
        for (i, ((g, w), s)) in got.iter().zip(want).zip(&scale).enumerate() {
            let err = (*g as f64 - *w as f64).abs() / ulp(*s);
            assert!(err <= bound, "{who} {u:?}, {n} elements, output {j}[{i}]: {g} vs the CPU's {w}, {err:.2} ulps of {s:e} > {bound}");
            worst[j] = worst[j].max(err);
        }
    }
    worst
}

fn optimizer_updates_agree_with_cpu_in_ulps<B: Backend>(b: &mut B) {
    let who = b.info().label();
    for u in Update::ALL {
        let mut worst = [0.0f64; 3];
        for (k, &n) in LENGTHS.iter().enumerate() {
            let start = Start::new(n, 900 + 10 * k as u64);
            let want = run(&mut CpuBackend::new(), u, &start);
            let got = run(b, u, &start);
            let w = compare(&who, u, &start, &got, &want);
            worst = std::array::from_fn(|j| worst[j].max(w[j]));
        }
        // The measured agreement, for the record.
        eprintln!("{who} {u:?}: max ulps vs CPU: p {:.2}, state {:.2}, {:.2}", worst[0], worst[1], worst[2]);
    }
}

backend_tests!([gpu, cuda] optimizer_updates_agree_with_cpu_in_ulps);

/// One update with every multiply-add fused (`mul_add`, one rounding), as the most contracting
/// GPU compiler would run the formulas: [p, s1, (s2)].
fn contracted(adam: bool, s: &Start) -> Vec<Vec<f32>> {
    let (mut p, mut s1, mut s2) = (s.p.clone(), s.s1.clone(), s.s2.clone());
    let f = ADAMW.factors(STEP);
    for i in 0..p.len() {
        let g = s.g[i];
        if adam {
            let m = ADAMW.beta1.mul_add(s1[i], (1.0 - ADAMW.beta1) * g);
            let v = ADAMW.beta2.mul_add(s2[i], (1.0 - ADAMW.beta2) * g * g);
            let q = f.step_size * m / (v.sqrt() / f.bias2_sqrt + ADAMW.eps);
            (p[i], s1[i], s2[i]) = (p[i].mul_add(f.decay, -q), m, v);
        } else {
            let v = SGD.momentum.mul_add(s1[i], SGD.weight_decay.mul_add(p[i], g));
            (p[i], s1[i]) = ((-SGD.lr).mul_add(v, p[i]), v);
        }
    }
    if adam { vec![p, s1, s2] } else { vec![p, s1] }
}

/// The bound holds for a compiler that contracts every multiply-add (what NVRTC's default and a
/// WGSL compiler may do), on far more elements than the backend test runs.
#[test]
fn a_contracting_compiler_stays_within_the_bound() {
    for u in [Update::Sgd, Update::AdamW] {
        let start = Start::new(300_001, 77);
        let want = run(&mut CpuBackend::new(), u, &start);
        let worst = compare("contracted on the host", u, &start, &contracted(u.adam(), &start), &want);
        eprintln!("every multiply-add contracted, {u:?}: max ulps vs CPU: p {:.2}, state {:.2}, {:.2}", worst[0], worst[1], worst[2]);
        assert!(worst[0] > 0.0, "contraction changed some result (else this test checks nothing)");
    }
}
