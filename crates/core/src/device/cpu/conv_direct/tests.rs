//! The fused stage against the op path it replaces (im2col, GEMM, bias-ReLU, max_pool and
//! their backward ops on the CPU), on shapes that are not multiples of the vector width.

use super::*;
use crate::device::CpuBackend;
use crate::tensor::{AmpOps, ConvOps, ConvStageGrads, ConvStageSaved, CoreOps, DType, Epilogue, ImageGeom, MemCategory as M};

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
            forward(path, s, None, &x, &wts, &bias, &mut pooled, &mut argmax);
            close(&format!("{what} pooled"), &pooled, &r.pooled, 1e-5);
            for (o, (&a, &b)) in argmax.iter().zip(&r.argmax).enumerate() {
                // Another winner only where the two candidates tie to rounding.
                let (va, vb) = (r.conv[a as usize], r.conv[b as usize]);
                assert!(a == b || (va - vb).abs() <= 1e-5 * (1.0 + vb.abs()), "{what} argmax[{o}]: {a} ({va}) vs {b} ({vb})");
            }
            // The backward from the op path's winners, so it is checked on its own.
            let (mut wg, mut bg, mut xg) = (vec![f32::NAN; wts.len()], vec![f32::NAN; cout], vec![f32::NAN; x.len()]);
            let saved = Saved { x: &x, weight: &wts, pooled: &r.pooled, argmax: &r.argmax };
            backward(path, s, None, saved, &gp, Grads { weight: &mut wg, bias: &mut bg, x: Some(&mut xg) });
            close(&format!("{what} weight grad"), &wg, &r.wgrad, 1e-4);
            close(&format!("{what} bias grad"), &bg, &r.bgrad, 1e-4);
            close(&format!("{what} input grad"), &xg, &r.xgrad, 1e-5);
            // Without the input gradient (the first stage), the same parameter gradients.
            let (mut wg2, mut bg2) = (vec![f32::NAN; wts.len()], vec![f32::NAN; cout]);
            let saved = Saved { x: &x, weight: &wts, pooled: &r.pooled, argmax: &r.argmax };
            backward(path, s, None, saved, &gp, Grads { weight: &mut wg2, bias: &mut bg2, x: None });
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
            forward(path, s, None, &x, &wts, &bias, &mut pooled, &mut argmax);
            let (mut wg, mut bg, mut xg) = (vec![0f32; wts.len()], vec![0f32; cout], vec![0f32; x.len()]);
            let saved = Saved { x: &x, weight: &wts, pooled: &pooled, argmax: &argmax };
            backward(path, s, None, saved, &values(n_out, 4), Grads { weight: &mut wg, bias: &mut bg, x: Some(&mut xg) });
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

/// The autocast op path (what the stem runs under autocast where the stage is not fused):
/// 16-bit columns, `matmul16` with the bias-ReLU epilogue, `max_pool`; backward `cast` of the
/// convolution's gradient (with its underflow stats) and `matmul16`s, `col2im`.
struct Autocast {
    pooled: Vec<f32>,
    argmax: Vec<u32>,
    conv: Vec<f32>,
    wgrad: Vec<f32>,
    bgrad: Vec<f32>,
    xgrad: Vec<f32>,
    stats: Vec<u32>,
}

/// Uploads f32 `v` and rounds it to `dt`.
fn upload16(b: &mut CpuBackend, v: &[f32], shape: [usize; 2], dt: DType) -> crate::device::cpu::CpuTensor {
    let t = b.upload_f32(v, shape, M::Inputs).unwrap();
    let mut h = b.zeros(shape, dt, M::Inputs).unwrap();
    b.cast(&t, &mut h, None).unwrap();
    h
}

fn autocast_ops(dt: DType, g: ImageGeom, cout: usize, x: &[f32], w: &[f32], bias: &[f32], gp: &[f32]) -> Autocast {
    let mut b = CpuBackend::new();
    let (pix, taps) = (g.pixels(), 9 * g.channels);
    let pooled_shape = [g.batch, cout * (g.height / 2) * (g.width / 2)];
    let xt = b.upload_f32(x, [g.batch, g.numel() / g.batch], M::Inputs).unwrap();
    let w16 = upload16(&mut b, w, [taps, cout], dt);
    let bt = b.upload_f32(bias, [1, cout], M::Inputs).unwrap();
    let mut cols = b.zeros([pix, taps], dt, M::Activations).unwrap();
    let mut conv = b.zeros([pix, cout], DType::F32, M::Activations).unwrap();
    let mut pooled = b.zeros(pooled_shape, DType::F32, M::Activations).unwrap();
    let mut argmax = b.zeros(pooled_shape, DType::U32, M::Activations).unwrap();
    b.im2col(&xt, &mut cols, g).unwrap();
    b.matmul16(&cols, &w16, &mut conv, false, false, Epilogue::Bias { bias: &bt, relu: true }, None).unwrap();
    b.max_pool(&conv, &mut pooled, &mut argmax, g.with_channels(cout)).unwrap();
    let gpt = b.upload_f32(gp, pooled_shape, M::Inputs).unwrap();
    let mut gconv = b.zeros([pix, cout], DType::F32, M::Activations).unwrap();
    b.max_pool_backward(&gpt, &argmax, &mut gconv, g.with_channels(cout)).unwrap();
    b.relu_backward(&mut gconv, &conv).unwrap();
    let mut bgrad = b.zeros([1, cout], DType::F32, M::Activations).unwrap();
    b.sum_cols(&gconv, &mut bgrad).unwrap();
    let mut stats = b.zeros([1, 2], DType::U32, M::Activations).unwrap();
    let mut g16 = b.zeros([pix, cout], dt, M::Activations).unwrap();
    b.cast(&gconv, &mut g16, Some(&mut stats)).unwrap();
    let mut wgrad = b.zeros([taps, cout], DType::F32, M::Activations).unwrap();
    b.matmul16(&cols, &g16, &mut wgrad, true, false, Epilogue::None, None).unwrap();
    let mut gcols = b.zeros([pix, taps], DType::F32, M::Activations).unwrap();
    b.matmul16(&g16, &w16, &mut gcols, false, true, Epilogue::None, None).unwrap();
    let mut xgrad = b.zeros([g.batch, g.numel() / g.batch], DType::F32, M::Activations).unwrap();
    b.col2im(&gcols, &mut xgrad, g).unwrap();
    Autocast {
        pooled: pooled.f32().to_vec(),
        argmax: argmax.u32().to_vec(),
        conv: conv.f32().to_vec(),
        wgrad: wgrad.f32().to_vec(),
        bgrad: bgrad.f32().to_vec(),
        xgrad: xgrad.f32().to_vec(),
        stats: stats.u32().to_vec(),
    }
}

/// The fused ops with a 16-bit weight: pooled, argmax, then from `saved_pool` (pooled and
/// argmax the backward reads) the weight, bias and input gradients and the stats.
type Fused16 = (Vec<f32>, Vec<u32>, [Vec<f32>; 3], Vec<u32>);

fn autocast_fused(
    dt: DType,
    g: ImageGeom,
    cout: usize,
    (x, w, bias, gp): (&[f32], &[f32], &[f32], &[f32]),
    saved_pool: Option<(&[f32], &[u32])>,
) -> Fused16 {
    let mut b = CpuBackend::new();
    let pooled_shape = [g.batch, cout * (g.height / 2) * (g.width / 2)];
    let xt = b.upload_f32(x, [g.batch, g.numel() / g.batch], M::Inputs).unwrap();
    let w16 = upload16(&mut b, w, [9 * g.channels, cout], dt);
    let bt = b.upload_f32(bias, [1, cout], M::Inputs).unwrap();
    let mut pooled = b.zeros(pooled_shape, DType::F32, M::Activations).unwrap();
    let mut argmax = b.zeros(pooled_shape, DType::U32, M::Activations).unwrap();
    b.conv_relu_pool(&xt, &w16, &bt, &mut pooled, &mut argmax, g).unwrap();
    let uploaded =
        saved_pool.map(|(p, a)| (b.upload_f32(p, pooled_shape, M::Inputs).unwrap(), b.upload_u32(a, pooled_shape, M::Inputs).unwrap()));
    let (sp, sa) = uploaded.as_ref().map_or((&pooled, &argmax), |(p, a)| (p, a));
    let gpt = b.upload_f32(gp, pooled_shape, M::Inputs).unwrap();
    let mut wg = b.zeros([9 * g.channels, cout], DType::F32, M::Activations).unwrap();
    let mut bg = b.zeros([1, cout], DType::F32, M::Activations).unwrap();
    let mut xg = b.zeros([g.batch, g.numel() / g.batch], DType::F32, M::Activations).unwrap();
    let mut stats = b.zeros([1, 2], DType::U32, M::Activations).unwrap();
    let saved = ConvStageSaved { x: &xt, weight: &w16, pooled: sp, argmax: sa };
    let grads = ConvStageGrads { weight: &mut wg, bias: &mut bg, x: Some(&mut xg), stats: Some(&mut stats) };
    b.conv_relu_pool_backward(saved, &gpt, grads, g).unwrap();
    (pooled.f32().to_vec(), argmax.u32().to_vec(), [wg, bg, xg].map(|t| t.f32().to_vec()), stats.u32().to_vec())
}

/// Pooled-map gradients with every third value tiny (1e-41: an f32 subnormal that both 16-bit
/// types flush to zero), so the underflow counts are exercised.
fn grads_with_underflows(n: usize, seed: u64) -> Vec<f32> {
    values(n, seed).into_iter().enumerate().map(|(i, v)| if i % 3 == 0 { v * 1e-41 } else { v }).collect()
}

#[test]
fn the_autocast_fused_stage_matches_the_autocast_op_path() {
    if Path::fastest().is_none() {
        eprintln!("this CPU has no AVX-512: the stem runs the op path, nothing fused to check");
        return;
    }
    for dt in [DType::BF16, DType::F16] {
        for (i, &(batch, cin, h, w, cout)) in SHAPES.iter().enumerate() {
            let g = ImageGeom { batch, height: h, width: w, channels: cin };
            let seed = 10 * i as u64 + 5;
            let (x, wts, bias) = (values(g.numel(), seed + 1), values(9 * cin * cout, seed + 2), values(cout, seed + 3));
            let gp = grads_with_underflows(batch * cout * (h / 2) * (w / 2), seed + 4);
            let r = autocast_ops(dt, g, cout, &x, &wts, &bias, &gp);
            let what = format!("{} {g:?} → {cout}", dt.name());
            let (pooled, argmax, _, _) = autocast_fused(dt, g, cout, (&x, &wts, &bias, &gp), None);
            close(&format!("{what} pooled"), &pooled, &r.pooled, 1e-5);
            for (o, (&a, &b)) in argmax.iter().zip(&r.argmax).enumerate() {
                let (va, vb) = (r.conv[a as usize], r.conv[b as usize]);
                assert!(a == b || (va - vb).abs() <= 1e-5 * (1.0 + vb.abs()), "{what} argmax[{o}]: {a} ({va}) vs {b} ({vb})");
            }
            // The backward from the op path's winners, so it is checked on its own.
            let (_, _, [wg, bg, xg], stats) = autocast_fused(dt, g, cout, (&x, &wts, &bias, &gp), Some((&r.pooled, &r.argmax)));
            close(&format!("{what} weight grad"), &wg, &r.wgrad, 1e-4);
            close(&format!("{what} bias grad"), &bg, &r.bgrad, 1e-4);
            close(&format!("{what} input grad"), &xg, &r.xgrad, 1e-5);
            assert_eq!(stats, r.stats, "{what}: underflow counts [nonzero, flushed]");
            assert!(stats[1] > 0, "{what}: the test's gradients should flush some values");
        }
    }
}

#[test]
fn the_autocast_fused_stage_does_not_depend_on_the_thread_count() {
    let g = ImageGeom { batch: 11, height: 14, width: 14, channels: 16 };
    let cout = 32;
    let (x, wts, bias) = (values(g.numel(), 1), values(9 * 16 * cout, 2), values(cout, 3));
    let gp = grads_with_underflows(11 * cout * 7 * 7, 4);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let (pooled, argmax, grads, stats) = autocast_fused(DType::BF16, g, cout, (&x, &wts, &bias, &gp), None);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            (bits(&pooled), argmax, grads.map(|v| bits(&v)), stats)
        })
    };
    if Path::fastest().is_some() {
        assert_eq!(run(1), run(3));
    }
}
