//! The fused stage against the op path it replaces (im2col, GEMM, bias-ReLU, max_pool and
//! their backward ops on the CPU), on shapes that are not multiples of the vector width.

use super::*;
use crate::device::CpuBackend;
use crate::tensor::{ConvOps, CoreOps, DType, ImageGeom, MemCategory as M};

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// (batch, cin, h, w, cout): odd sizes, batch 1, one channel and more than a vector of each.
const SHAPES: [(usize, usize, usize, usize, usize); 7] =
    [(1, 1, 5, 7, 3), (3, 3, 9, 6, 17), (5, 17, 7, 11, 20), (2, 1, 28, 28, 16), (6, 16, 14, 14, 32), (4, 2, 4, 5, 40), (9, 5, 3, 2, 64)];

struct Reference {
    conv: Vec<f32>,
    pooled: Vec<f32>,
    argmax: Vec<u32>,
    wgrad: Vec<f32>,
    bgrad: Vec<f32>,
    xgrad: Vec<f32>,
}

/// The op path: what the stem runs where the stage is not fused.
fn reference(g: ImageGeom, cout: usize, x: &[f32], w: &[f32], bias: &[f32], gp: &[f32]) -> Reference {
    let mut b = CpuBackend::new();
    let pooled_shape = [g.batch, cout * (g.height / 2) * (g.width / 2)];
    let xt = b.upload_f32(x, [g.batch, g.numel() / g.batch], M::Inputs).unwrap();
    let wt = b.upload_f32(w, [9 * g.channels, cout], M::Inputs).unwrap();
    let bt = b.upload_f32(bias, [1, cout], M::Inputs).unwrap();
    let mut cols = b.zeros([g.pixels(), 9 * g.channels], DType::F32, M::Activations).unwrap();
    let mut conv = b.zeros([g.pixels(), cout], DType::F32, M::Activations).unwrap();
    let mut pooled = b.zeros(pooled_shape, DType::F32, M::Activations).unwrap();
    let mut argmax = b.zeros(pooled_shape, DType::U32, M::Activations).unwrap();
    b.im2col(&xt, &mut cols, g).unwrap();
    b.matmul(&cols, &wt, &mut conv, false, false, false).unwrap();
    b.bias_relu(&mut conv, &bt).unwrap();
    b.max_pool(&conv, &mut pooled, &mut argmax, g.with_channels(cout)).unwrap();
    let gpt = b.upload_f32(gp, pooled_shape, M::Inputs).unwrap();
    let mut gconv = b.zeros([g.pixels(), cout], DType::F32, M::Activations).unwrap();
    b.max_pool_backward(&gpt, &argmax, &mut gconv, g.with_channels(cout)).unwrap();
    b.relu_backward(&mut gconv, &conv).unwrap();
    let mut wgrad = b.zeros([9 * g.channels, cout], DType::F32, M::Activations).unwrap();
    let mut bgrad = b.zeros([1, cout], DType::F32, M::Activations).unwrap();
    b.sum_cols(&gconv, &mut bgrad).unwrap();
    b.matmul(&cols, &gconv, &mut wgrad, true, false, false).unwrap();
    let mut gcols = b.zeros([g.pixels(), 9 * g.channels], DType::F32, M::Activations).unwrap();
    b.matmul(&gconv, &wt, &mut gcols, false, true, false).unwrap();
    let mut xgrad = b.zeros([g.batch, g.numel() / g.batch], DType::F32, M::Activations).unwrap();
    b.col2im(&gcols, &mut xgrad, g).unwrap();
    Reference {
        conv: conv.f32().to_vec(),
        pooled: pooled.f32().to_vec(),
        argmax: argmax.u32().to_vec(),
        wgrad: wgrad.f32().to_vec(),
        bgrad: bgrad.f32().to_vec(),
        xgrad: xgrad.f32().to_vec(),
    }
}

fn close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
    }
}

fn paths() -> Vec<Path> {
    let mut p = vec![Path::Portable];
    match Path::fastest() {
        Some(fast) => p.push(fast),
        None => eprintln!("this CPU has no AVX-512: only the portable lanes are checked"),
    }
    p
}

#[test]
fn the_fused_stage_matches_the_op_path() {
    for (i, &(batch, cin, h, w, cout)) in SHAPES.iter().enumerate() {
        let g = ImageGeom { batch, height: h, width: w, channels: cin };
        let s = Stage { batch, cin, cout, h, w };
        let seed = 10 * i as u64;
        let (x, wts, bias) = (values(g.numel(), seed + 1), values(9 * cin * cout, seed + 2), values(cout, seed + 3));
        let n_out = batch * cout * (h / 2) * (w / 2);
        let gp = values(n_out, seed + 4);
        let r = reference(g, cout, &x, &wts, &bias, &gp);
        for path in paths() {
            let what = format!("{path:?} {s:?}");
            let (mut pooled, mut argmax) = (vec![f32::NAN; n_out], vec![u32::MAX; n_out]);
            forward(path, s, &x, &wts, &bias, &mut pooled, &mut argmax);
            close(&format!("{what} pooled"), &pooled, &r.pooled, 1e-5);
            for (o, (&a, &b)) in argmax.iter().zip(&r.argmax).enumerate() {
                // Another winner only where the two candidates tie to rounding.
                let (va, vb) = (r.conv[a as usize], r.conv[b as usize]);
                assert!(a == b || (va - vb).abs() <= 1e-5 * (1.0 + vb.abs()), "{what} argmax[{o}]: {a} ({va}) vs {b} ({vb})");
            }
            // The backward from the op path's winners, so it is checked on its own.
            let (mut wg, mut bg, mut xg) = (vec![f32::NAN; wts.len()], vec![f32::NAN; cout], vec![f32::NAN; x.len()]);
            let saved = Saved { x: &x, weight: &wts, pooled: &r.pooled, argmax: &r.argmax };
            backward(path, s, saved, &gp, Grads { weight: &mut wg, bias: &mut bg, x: Some(&mut xg) });
            close(&format!("{what} weight grad"), &wg, &r.wgrad, 1e-4);
            close(&format!("{what} bias grad"), &bg, &r.bgrad, 1e-4);
            close(&format!("{what} input grad"), &xg, &r.xgrad, 1e-5);
            // Without the input gradient (the first stage), the same parameter gradients.
            let (mut wg2, mut bg2) = (vec![f32::NAN; wts.len()], vec![f32::NAN; cout]);
            let saved = Saved { x: &x, weight: &wts, pooled: &r.pooled, argmax: &r.argmax };
            backward(path, s, saved, &gp, Grads { weight: &mut wg2, bias: &mut bg2, x: None });
            assert_eq!((&wg2, &bg2), (&wg, &bg), "{what}: the gradients without the input's");
        }
    }
}

#[test]
fn the_fused_gradients_do_not_depend_on_the_thread_count() {
    let (batch, cin, h, w, cout) = (11, 16, 14, 14, 32);
    let s = Stage { batch, cin, cout, h, w };
    let (x, wts, bias) = (values(batch * cin * h * w, 1), values(9 * cin * cout, 2), values(cout, 3));
    let n_out = batch * cout * (h / 2) * (w / 2);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let path = Path::fastest().unwrap_or(Path::Portable);
            let (mut pooled, mut argmax) = (vec![0f32; n_out], vec![0u32; n_out]);
            forward(path, s, &x, &wts, &bias, &mut pooled, &mut argmax);
            let (mut wg, mut bg, mut xg) = (vec![0f32; wts.len()], vec![0f32; cout], vec![0f32; x.len()]);
            let saved = Saved { x: &x, weight: &wts, pooled: &pooled, argmax: &argmax };
            backward(path, s, saved, &values(n_out, 4), Grads { weight: &mut wg, bias: &mut bg, x: Some(&mut xg) });
            [pooled, wg, bg, xg].map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>())
        })
    };
    assert_eq!(run(1), run(3));
}

/// The backend's ops refuse what the fused kernels cannot take, by name.
#[test]
fn the_fused_ops_check_their_shapes() {
    let mut b = CpuBackend::new();
    let g = ImageGeom { batch: 2, height: 4, width: 4, channels: 3 };
    let x = b.zeros([2, 48], DType::F32, M::Inputs).unwrap();
    let w = b.zeros([27, 5], DType::F32, M::Inputs).unwrap();
    let bias = b.zeros([1, 4], DType::F32, M::Inputs).unwrap();
    let mut pooled = b.zeros([2, 20], DType::F32, M::Activations).unwrap();
    let mut arg = b.zeros([2, 20], DType::U32, M::Activations).unwrap();
    let err = b.conv_relu_pool(&x, &w, &bias, &mut pooled, &mut arg, g).unwrap_err().to_string();
    assert!(err.contains("conv_relu_pool") && err.contains("[1, 5]"), "{err}");
    let bias = b.zeros([1, 5], DType::F32, M::Inputs).unwrap();
    let mut small = b.zeros([2, 16], DType::F32, M::Activations).unwrap();
    let err = b.conv_relu_pool(&x, &w, &bias, &mut small, &mut arg, g).unwrap_err().to_string();
    assert!(err.contains("pooled"), "{err}");
}
