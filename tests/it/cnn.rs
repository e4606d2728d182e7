//! The small CNN: each convolution kernel against the CPU reference on odd shapes with poisoned
//! outputs (and the CPU reference against a direct convolution and pool), the CNN's gradients by
//! finite differences, CPU/GPU agreement of its first training steps, a short run on shapes
//! that learns, the same under autocast (16-bit columns and GEMMs), and the refusals of what it
//! cannot do.

use gpulab::data::{self, DatasetSpec};
use gpulab::device::CpuBackend;
use gpulab::nn::{ConvConfig, Mlp, MlpConfig, ModelKind, Optimizer, OptimizerKind, Precision, Workspace};
use gpulab::tensor::{DType, ImageGeom, MemCategory as M, float16, prelude::*};
use gpulab::train::{NullSink, TrainConfig, TrainEvent, train};

use crate::common::{assert_close, backend_tests, random};

/// Odd sizes and channel counts, none a multiple of the workgroup; the last is large enough
/// for the CPU's parallel path (over 2^15 elements).
const GEOMS: [ImageGeom; 4] = [
    ImageGeom { batch: 1, height: 2, width: 2, channels: 1 },
    ImageGeom { batch: 3, height: 5, width: 7, channels: 3 },
    ImageGeom { batch: 2, height: 9, width: 4, channels: 17 },
    ImageGeom { batch: 5, height: 17, width: 13, channels: 33 },
];

fn chw(g: ImageGeom) -> [usize; 2] {
    [g.batch, g.channels * g.height * g.width]
}

fn taps(g: ImageGeom) -> [usize; 2] {
    [g.pixels(), 9 * g.channels]
}

fn pooled(g: ImageGeom) -> [usize; 2] {
    chw(g.pooled())
}

fn im2col<B: Backend>(b: &mut B, x: &[f32], g: ImageGeom) -> Vec<f32> {
    let x = b.upload_f32(x, chw(g), M::Inputs).unwrap();
    let mut cols = b.upload_f32(&vec![f32::NAN; g.numel() * 9], taps(g), M::Activations).unwrap();
    b.im2col(&x, &mut cols, g).unwrap();
    b.read_f32(&cols).unwrap()
}

/// im2col into 16-bit columns, read back widened to f32.
fn im2col16<B: Backend>(b: &mut B, x: &[f32], g: ImageGeom, dt: DType) -> Vec<f32> {
    let x = b.upload_f32(x, chw(g), M::Inputs).unwrap();
    let mut cols = b.zeros(taps(g), dt, M::Activations).unwrap();
    b.write_f32(&mut cols, &vec![f32::NAN; g.numel() * 9]).unwrap();
    b.im2col(&x, &mut cols, g).unwrap();
    b.read_f32(&cols).unwrap()
}

fn col2im<B: Backend>(b: &mut B, cols: &[f32], g: ImageGeom) -> Vec<f32> {
    let cols = b.upload_f32(cols, taps(g), M::Inputs).unwrap();
    let mut x = b.upload_f32(&vec![f32::NAN; g.numel()], chw(g), M::Activations).unwrap();
    b.col2im(&cols, &mut x, g).unwrap();
    b.read_f32(&x).unwrap()
}

fn max_pool<B: Backend>(b: &mut B, x: &[f32], g: ImageGeom) -> (Vec<f32>, Vec<u32>) {
    let n = g.pooled().numel();
    let x = b.upload_f32(x, [g.pixels(), g.channels], M::Inputs).unwrap();
    let mut out = b.upload_f32(&vec![f32::NAN; n], pooled(g), M::Activations).unwrap();
    let mut arg = b.upload_u32(&vec![u32::MAX; n], pooled(g), M::Activations).unwrap();
    b.max_pool(&x, &mut out, &mut arg, g).unwrap();
    (b.read_f32(&out).unwrap(), b.read_u32(&arg).unwrap())
}

fn max_pool_backward<B: Backend>(b: &mut B, grad_out: &[f32], arg: &[u32], g: ImageGeom) -> Vec<f32> {
    let go = b.upload_f32(grad_out, pooled(g), M::Inputs).unwrap();
    let arg = b.upload_u32(arg, pooled(g), M::Inputs).unwrap();
    let mut gi = b.upload_f32(&vec![f32::NAN; g.numel()], [g.pixels(), g.channels], M::Activations).unwrap();
    b.max_pool_backward(&go, &arg, &mut gi, g).unwrap();
    b.read_f32(&gi).unwrap()
}

/// Values on a grid of 0.5 steps, so pooling windows hold ties (the first maximum must win).
fn with_ties(n: usize, seed: u64) -> Vec<f32> {
    random(n, seed, -2.0, 2.0).into_iter().map(|v| (v * 2.0).round() / 2.0).collect()
}

#[test]
fn cpu_im2col_and_gemm_compute_a_direct_convolution() {
    let mut cpu = CpuBackend::new();
    for (i, g) in GEOMS.into_iter().enumerate() {
        let cout = 5;
        let x = random(g.numel(), 10 + i as u64, -1.0, 1.0);
        let w = random(9 * g.channels * cout, 20 + i as u64, -1.0, 1.0);
        let cols = im2col(&mut cpu, &x, g);
        let ct = cpu.upload_f32(&cols, taps(g), M::Inputs).unwrap();
        let wt = cpu.upload_f32(&w, [9 * g.channels, cout], M::Inputs).unwrap();
        let mut out = cpu.zeros([g.pixels(), cout], gpulab::tensor::DType::F32, M::Activations).unwrap();
        cpu.matmul(&ct, &wt, &mut out, false, false, false).unwrap();
        let got = cpu.read_f32(&out).unwrap();
        // out[(n, y, x), o] = Σ_c Σ_ky Σ_kx in[n, c, y + ky − 1, x + kx − 1] · w[c·9 + ky·3 + kx, o]
        let (h, wd, c) = (g.height as isize, g.width as isize, g.channels);
        let mut want = vec![0f32; g.pixels() * cout];
        for n in 0..g.batch {
            for y in 0..h {
                for xx in 0..wd {
                    for o in 0..cout {
                        let mut s = 0f64;
                        for ch in 0..c {
                            for ky in 0..3isize {
                                for kx in 0..3isize {
                                    let (sy, sx) = (y + ky - 1, xx + kx - 1);
                                    if (0..h).contains(&sy) && (0..wd).contains(&sx) {
                                        let v = x[((n * c + ch) * g.height + sy as usize) * g.width + sx as usize];
                                        s += v as f64 * w[(ch * 9 + (ky * 3 + kx) as usize) * cout + o] as f64;
                                    }
                                }
                            }
                        }
                        want[((n * g.height + y as usize) * g.width + xx as usize) * cout + o] = s as f32;
                    }
                }
            }
        }
        assert_close(&format!("conv {g:?}"), &got, &want, 1e-5);
    }
}

/// Bit patterns, so a NaN left by a missed write and a −0 both compare as themselves.
fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn cpu_im2col_into_16_bits_is_the_rounding_of_the_f32_columns() {
    let mut cpu = CpuBackend::new();
    for (i, g) in GEOMS.into_iter().enumerate() {
        // Values below f16's smallest normal and above bf16's precision, and signed zeros.
        let mut x = random(g.numel(), 300 + i as u64, -3.0, 3.0);
        for (j, v) in x.iter_mut().enumerate().step_by(7) {
            *v = [1e-6, -0.0, 1.0 + 1.0 / 512.0, 70000.0][j % 4];
        }
        let cols = im2col(&mut cpu, &x, g);
        for dt in [DType::F16, DType::BF16] {
            let want: Vec<f32> = cols.iter().map(|&v| float16::round(dt, v)).collect();
            assert_eq!(bits(&im2col16(&mut cpu, &x, g, dt)), bits(&want), "{} im2col {g:?}", dt.name());
        }
    }
    let (x, mut cols) = (cpu.zeros([1, 4], DType::F16, M::Inputs).unwrap(), cpu.zeros([4, 9], DType::F16, M::Activations).unwrap());
    let err = cpu.im2col(&x, &mut cols, GEOMS[0]).unwrap_err().to_string();
    assert!(err.contains("im2col"), "16-bit images are refused: {err}");
}

#[test]
fn cpu_col2im_is_the_adjoint_of_im2col() {
    let mut cpu = CpuBackend::new();
    for (i, g) in GEOMS.into_iter().enumerate() {
        let x = random(g.numel(), 30 + i as u64, -1.0, 1.0);
        let c = random(g.numel() * 9, 40 + i as u64, -1.0, 1.0);
        let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(p, q)| *p as f64 * *q as f64).sum::<f64>();
        let lhs = dot(&im2col(&mut cpu, &x, g), &c);
        let rhs = dot(&x, &col2im(&mut cpu, &c, g));
        assert!((lhs - rhs).abs() <= 1e-4 * (lhs.abs() + 1.0), "{g:?}: <im2col x, c> = {lhs} but <x, col2im c> = {rhs}");
    }
}

#[test]
fn cpu_max_pool_and_its_backward_match_a_direct_pool() {
    let mut cpu = CpuBackend::new();
    for (i, g) in GEOMS.into_iter().enumerate() {
        let x = with_ties(g.numel(), 50 + i as u64);
        let (out, arg) = max_pool(&mut cpu, &x, g);
        let p = g.pooled();
        let grad_out = random(p.numel(), 60 + i as u64, -1.0, 1.0);
        let mut want_grad = vec![0f32; g.numel()];
        for n in 0..g.batch {
            for ch in 0..g.channels {
                for oy in 0..p.height {
                    for ox in 0..p.width {
                        let at = |dy: usize, dx: usize| ((n * g.height + 2 * oy + dy) * g.width + 2 * ox + dx) * g.channels + ch;
                        // The first maximum in reading order wins.
                        let win = [at(0, 0), at(0, 1), at(1, 0), at(1, 1)]
                            .into_iter()
                            .fold(at(0, 0), |best, j| if x[j] > x[best] { j } else { best });
                        let o = ((n * g.channels + ch) * p.height + oy) * p.width + ox;
                        assert_eq!((arg[o] as usize, out[o]), (win, x[win]), "{g:?} output {o}");
                        want_grad[win] = grad_out[o];
                    }
                }
            }
        }
        assert_eq!(max_pool_backward(&mut cpu, &grad_out, &arg, g), want_grad, "{g:?} backward");
    }
}

fn conv_kernels_match_the_cpu_on_odd_shapes<B: Backend>(gpu: &mut B) {
    let mut cpu = CpuBackend::new();
    for (i, g) in GEOMS.into_iter().enumerate() {
        let seed = 100 + 10 * i as u64;
        let x = random(g.numel(), seed, -1.0, 1.0);
        assert_eq!(im2col(gpu, &x, g), im2col(&mut cpu, &x, g), "im2col {g:?}");
        for dt in [DType::F16, DType::BF16] {
            match gpu.amp_unavailable(dt) {
                None => assert_eq!(bits(&im2col16(gpu, &x, g, dt)), bits(&im2col16(&mut cpu, &x, g, dt)), "{} im2col {g:?}", dt.name()),
                Some(why) => eprintln!("skipping the {} im2col: {why}", dt.name()),
            }
        }
        let cols = random(g.numel() * 9, seed + 1, -1.0, 1.0);
        assert_close(&format!("col2im {g:?}"), &col2im(gpu, &cols, g), &col2im(&mut cpu, &cols, g), 1e-6);
        for x in [x, with_ties(g.numel(), seed + 2)] {
            let (got, got_arg) = max_pool(gpu, &x, g);
            let (want, want_arg) = max_pool(&mut cpu, &x, g);
            assert_eq!((got, &got_arg), (want, &want_arg), "max_pool {g:?}");
            let go = random(g.pooled().numel(), seed + 3, -1.0, 1.0);
            assert_eq!(max_pool_backward(gpu, &go, &got_arg, g), max_pool_backward(&mut cpu, &go, &want_arg, g), "max_pool_backward {g:?}");
        }
    }
}

backend_tests!(vs_cpu: conv_kernels_match_the_cpu_on_odd_shapes);

/// A CNN small enough to check every gradient by finite differences: 5×4 images of 2
/// channels, convolutions →3 →4, a hidden layer of 6, 3 classes, 3 samples.
fn tiny_cnn() -> MlpConfig {
    MlpConfig { input: 40, hidden: vec![6], classes: 3, conv: Some(ConvConfig { image: [2, 5, 4], channels: vec![3, 4] }) }
}

/// Mean cross-entropy of the current forward pass, on the host in f64.
fn mean_loss(b: &mut CpuBackend, model: &Mlp<CpuBackend>, ws: &mut Workspace<CpuBackend>, y: &[u32]) -> f64 {
    model.forward(b, ws).unwrap();
    let logits = b.read_f32(ws.logits()).unwrap();
    let k = logits.len() / y.len();
    let rows = logits.chunks(k).zip(y);
    rows.map(|(r, &label)| {
        let m = r.iter().fold(f32::MIN, |a, &v| a.max(v)) as f64;
        let lse = m + r.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        lse - r[label as usize] as f64
    })
    .sum::<f64>()
        / y.len() as f64
}

#[test]
fn cnn_gradients_match_finite_differences() {
    let mut b = CpuBackend::new();
    let cfg = tiny_cnn();
    let mut model = Mlp::new(&mut b, cfg.clone(), Optimizer::new(OptimizerKind::Sgd, 0.1, 0.0, 0.0), 5).unwrap();
    let mut ws = Workspace::new(&mut b, &cfg, 3, true).unwrap();
    let y = [0u32, 2, 1];
    b.write_f32(&mut ws.x, &random(3 * 40, 8, 0.0, 1.0)).unwrap();
    b.write_u32(&mut ws.y, &y).unwrap();
    model.forward(&mut b, &mut ws).unwrap();
    model.backward(&mut b, &mut ws).unwrap();
    let eps = 3e-3f32;
    // (tensor name, which parameter): every convolution weight and bias, and the first dense
    // layer (whose input is the pooled maps).
    let picks: [(&str, fn(&mut Mlp<CpuBackend>) -> &mut gpulab::nn::Param<CpuBackend>); 5] = [
        ("conv 0 weight", |m| &mut m.stem.as_mut().unwrap().weights[0]),
        ("conv 0 bias", |m| &mut m.stem.as_mut().unwrap().biases[0]),
        ("conv 1 weight", |m| &mut m.stem.as_mut().unwrap().weights[1]),
        ("conv 1 bias", |m| &mut m.stem.as_mut().unwrap().biases[1]),
        ("dense 0 weight", |m| &mut m.weights[0]),
    ];
    let (mut checked, mut total) = (0, 0);
    for (name, pick) in picks {
        let analytic = b.read_f32(&pick(&mut model).grad).unwrap();
        let values = b.read_f32(&pick(&mut model).value).unwrap();
        let base = mean_loss(&mut b, &model, &mut ws, &y);
        let (mut an, mut numeric) = (Vec::new(), Vec::new());
        for i in 0..values.len() {
            let mut at = |delta: f32, b: &mut CpuBackend, model: &mut Mlp<CpuBackend>| {
                let mut v = values.clone();
                v[i] += delta;
                b.write_f32(&mut pick(model).value, &v).unwrap();
                mean_loss(b, model, &mut ws, &y)
            };
            let (plus, minus) = (at(eps, &mut b, &mut model), at(-eps, &mut b, &mut model));
            // A ReLU or a pool's winner switching inside [−eps, eps] makes the loss kink there:
            // the one-sided slopes then disagree, and the central difference says nothing.
            let (right, left) = ((plus - base) / eps as f64, (base - minus) / eps as f64);
            total += 1;
            if (right - left).abs() > 0.05 * (right.abs() + left.abs()) + 1e-3 {
                continue;
            }
            checked += 1;
            an.push(analytic[i]);
            numeric.push(((plus - minus) / (2.0 * eps as f64)) as f32);
        }
        b.write_f32(&mut pick(&mut model).value, &values).unwrap();
        let norm = |v: &[f32]| v.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
        let diff: Vec<f32> = an.iter().zip(&numeric).map(|(a, n)| a - n).collect();
        assert!(norm(&an) > 1e-3, "{name}: gradient {an:?} is too small to check");
        assert!(norm(&diff) <= 2e-2 * norm(&an), "{name}: analytic {an:?} vs finite differences {numeric:?}");
    }
    assert!(checked * 10 >= total * 9, "only {checked} of {total} gradients were away from a kink");
}

fn cnn_config(epochs: usize, log_every: usize) -> TrainConfig {
    TrainConfig { hidden: vec![64], batch: 32, epochs, lr: 0.05, log_every, model: ModelKind::Cnn, ..TrainConfig::default() }
}

fn losses<B: Backend>(b: &mut B, data: &data::Dataset, cfg: &TrainConfig) -> Vec<f64> {
    let mut seen = Vec::new();
    let mut sink = |ev: TrainEvent| {
        if let TrainEvent::Progress { loss, .. } = ev {
            seen.push(loss);
        }
    };
    train(b, data, cfg, &mut sink).unwrap();
    seen
}

fn cnn_first_training_steps_agree_with_the_cpu<B: Backend>(gpu: &mut B) {
    let data = data::load(&"shapes:res=12,channels=3,n=200".parse::<DatasetSpec>().unwrap(), 4).unwrap();
    let cfg = cnn_config(1, 1);
    let want = losses(&mut CpuBackend::new(), &data, &cfg);
    let got = losses(gpu, &data, &cfg);
    assert_eq!(got.len(), want.len());
    let first: Vec<f32> = want.iter().take(5).map(|&l| l as f32).collect();
    assert_close("first CNN losses", &got.iter().take(5).map(|&l| l as f32).collect::<Vec<_>>(), &first, 1e-4);
}

backend_tests!(vs_cpu: cnn_first_training_steps_agree_with_the_cpu);

#[test]
fn a_short_cnn_run_learns_shapes_well_above_chance() {
    let data = data::load(&"shapes:res=16,n=1200".parse::<DatasetSpec>().unwrap(), 7).unwrap();
    let report = train(&mut CpuBackend::new(), &data, &cnn_config(4, 10), &mut NullSink).unwrap();
    assert!(report.model.starts_with("CNN 1x16x16 conv3x3 16-pool-conv3x3 32-pool-512-64-4"), "{}", report.model);
    assert!(report.final_val_accuracy >= 0.6, "4 classes (chance 25%); validation accuracy {:.3}", report.final_val_accuracy);
}

/// Under autocast the CNN trains as well as in FP32 (its convolutions' gradients unscaled and
/// updated like the dense layers': a missed one would train at 65536× the step). Where the
/// stages run by ops, with less activation memory: the columns, the largest buffers, are
/// 16-bit (≈ 0.86× here; the convolution outputs, pooled maps and their gradients stay f32).
/// Where the backend fuses them (the CPU with AVX-512) there are no columns at either
/// precision: the stages' buffers are the same f32 ones, and autocast adds only the dense
/// head's 16-bit input.
fn check_autocast_cnn<B: Backend>(b: &mut B, name: &str) {
    let data = data::load(&"shapes:res=16,n=1200".parse::<DatasetSpec>().unwrap(), 7).unwrap();
    b.reset_memory_peaks();
    let fp32 = train(b, &data, &cnn_config(4, 10), &mut NullSink).unwrap();
    let act = |r: &gpulab::train::TrainReport| r.memory.categories.iter().find(|c| c.0 == M::Activations).unwrap().2;
    for p in [Precision::F16, Precision::BF16] {
        let dt = p.dtype16().unwrap();
        let stage1 = ImageGeom { batch: 32, height: 16, width: 16, channels: 1 };
        let fused = b.fuses_conv_stage(stage1, 16, false, dt) && b.fuses_conv_stage(stage1.with_channels(16).pooled(), 32, true, dt);
        if let Some(why) = b.amp_unavailable(dt) {
            eprintln!("{name}: skipping {}: {why}", p.name());
            continue;
        }
        let cfg = TrainConfig { amp: gpulab::nn::AmpConfig::new(p), ..cnn_config(4, 10) };
        b.reset_memory_peaks();
        let r = train(b, &data, &cfg, &mut NullSink).unwrap();
        eprintln!(
            "{name} CNN {}: {:.1}% vs FP32 {:.1}%; activations {} vs {} bytes",
            p.name(),
            r.final_val_accuracy * 100.0,
            fp32.final_val_accuracy * 100.0,
            act(&r),
            act(&fp32)
        );
        assert!(
            r.final_val_accuracy >= 0.6 && (r.final_val_accuracy - fp32.final_val_accuracy).abs() <= 0.08,
            "{name} CNN {}: {:.3} vs FP32 {:.3}",
            p.name(),
            r.final_val_accuracy,
            fp32.final_val_accuracy
        );
        let most = if fused { 1.1 } else { 0.9 };
        assert!((act(&r) as f64) < most * act(&fp32) as f64, "{name} CNN {}: activations {} vs FP32 {}", p.name(), act(&r), act(&fp32));
        assert_eq!(r.amp.as_ref().unwrap().scale_history.is_empty(), p == Precision::BF16);
    }
}

#[test]
fn cnn_trains_under_autocast_as_well_as_in_fp32_on_cpu() {
    check_autocast_cnn(&mut CpuBackend::new(), "cpu");
}

fn cnn_trains_under_autocast_as_well_as_in_fp32<B: Backend>(b: &mut B) {
    let name = b.info().kind.name().to_string();
    check_autocast_cnn(b, &name);
}

backend_tests!(vs_cpu: cnn_trains_under_autocast_as_well_as_in_fp32);

fn autocast_cnn_first_steps_agree_with_the_cpu<B: Backend>(gpu: &mut B) {
    let data = data::load(&"shapes:res=12,channels=3,n=200".parse::<DatasetSpec>().unwrap(), 4).unwrap();
    let cfg = TrainConfig { amp: gpulab::nn::AmpConfig::new(Precision::BF16), ..cnn_config(1, 1) };
    if let Some(why) = gpu.amp_unavailable(DType::BF16) {
        return eprintln!("skipping the bf16 CNN: {why}");
    }
    let want = losses(&mut CpuBackend::new(), &data, &cfg);
    let got = losses(gpu, &data, &cfg);
    assert_eq!(got.len(), want.len());
    let first = |l: &[f64]| l.iter().take(5).map(|&v| v as f32).collect::<Vec<_>>();
    // bf16 keeps 8 bits: the two backends sum the same rounded products in other orders.
    assert_close("first autocast CNN losses", &first(&got), &first(&want), 1e-2);
}

backend_tests!(vs_cpu: autocast_cnn_first_steps_agree_with_the_cpu);

#[test]
fn cnn_flops_and_parameters_count_the_convolutions() {
    let cfg = ModelKind::Cnn.config([3, 8, 8], 192, &[10], 4).unwrap();
    // conv 3→16 on 8×8: 2·64·27·16; conv 16→32 on 4×4: 2·16·144·32; dense 2·2·32→10→4.
    let want = 2.0 * (64.0 * 27.0 * 16.0 + 16.0 * 144.0 * 32.0 + 128.0 * 10.0 + 10.0 * 4.0);
    assert_eq!(cfg.forward_flops_per_sample(), want);
    assert_eq!(cfg.parameter_count(), 27 * 16 + 16 + 144 * 32 + 32 + 128 * 10 + 10 + 10 * 4 + 4);
    // A training step: forward, weight gradients, input gradients of all but the first layer.
    assert_eq!(cfg.training_flops_per_sample(), 3.0 * want - 2.0 * 64.0 * 27.0 * 16.0);
    let mlp = ModelKind::Mlp.config([1, 28, 28], 784, &[256, 128], 10).unwrap();
    assert_eq!(mlp.training_flops_per_sample(), 3.0 * 2.0 * (784.0 * 256.0 + 256.0 * 128.0 + 128.0 * 10.0) - 2.0 * 784.0 * 256.0);
}

#[test]
fn what_the_cnn_cannot_do_is_refused_by_name() {
    let err = ModelKind::Cnn.config([1, 3, 3], 9, &[8], 2).unwrap_err().to_string();
    assert!(err.contains("model cnn") && err.contains("at least 4×4"), "{err}");
    let err = ModelKind::Cnn.config([1, 8, 8], 10, &[8], 2).unwrap_err().to_string();
    assert!(err.contains("image data set"), "{err}");
    assert!("resnet".parse::<ModelKind>().unwrap_err().to_string().contains("mlp or cnn"));
}
