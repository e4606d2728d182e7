//! The sync-free GradScaler (`tensor::scaler`, issue 16): on an overflow sequence (inf and NaN
//! gradients injected at chosen steps, a loss scale that is not a power of two), the device's
//! unscale → gated update → `scaler_update` chain equals the per-step host path — the host
//! `GradScaler` deciding after reading the flag, the host-stepped `sgd_step`/`adamw_step` on the
//! same backend, AdamW's t counting only the steps taken — bit for bit: skipped steps, scale,
//! tracker, step count, weights, optimizer state; the fused 16-bit weight copies equal the host
//! conversion of the updated weights. And a training run's scale history replays exactly through
//! the host `GradScaler`.

use gpulab::data::{self, DatasetSpec};
use gpulab::nn::{AmpConfig, GradScaler, GradScalerConfig, Precision};
use gpulab::tensor::scaler::{self, AmpOptimizer, SKIPPED_BIT, ScalerRule, word};
use gpulab::tensor::{AdamW, Backend, DType, MemCategory as M, Sgd, float16};
use gpulab::train::{NullSink, TrainConfig, train};

use crate::common::{backend_tests, random};

const STEPS: u64 = 14;
/// Steps whose gradients hold an inf (2, 3: back to back) or a NaN (9).
const BAD: [u64; 3] = [2, 3, 9];
const SHAPE: [usize; 2] = [7, 13]; // 91 elements: odd, and not a multiple of the workgroup

fn config() -> GradScalerConfig {
    // 1e10 is not a power of two, so the reciprocal and the backoff round.
    GradScalerConfig { init_scale: 1e10, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: 3, min_scale: 1.0 }
}

fn rule(c: GradScalerConfig) -> ScalerRule {
    ScalerRule {
        scaling: true,
        growth_factor: c.growth_factor,
        backoff_factor: c.backoff_factor,
        growth_interval: c.growth_interval,
        min_scale: c.min_scale,
    }
}

fn grads(step: u64) -> Vec<f32> {
    let mut g = random(SHAPE[0] * SHAPE[1], 100 + step, -3e9, 3e9);
    if BAD.contains(&step) {
        let at = (step as usize * 17) % g.len();
        g[at] = if step == 9 { f32::NAN } else { f32::INFINITY };
    }
    g
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs the overflow sequence both ways on `b` for one optimizer and 16-bit type.
fn sequence<B: Backend>(b: &mut B, adam: bool, dt: DType) {
    let what = format!("{} {} on {}", if adam { "AdamW" } else { "SGD" }, dt.name(), b.info().label());
    let c = config();
    let n = SHAPE[0] * SHAPE[1];
    let init = random(n, 7, -1.0, 1.0);
    let slots_n = if adam { 2 } else { 1 };
    let (sgd, adamw) =
        (Sgd { lr: 0.05, momentum: 0.9, weight_decay: 1e-3 }, AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 1e-2 });

    // Sync-free: nothing read back until the end.
    let mut p = b.upload_f32(&init, SHAPE, M::Parameters).unwrap();
    let mut g = b.zeros(SHAPE, DType::F32, M::Gradients).unwrap();
    let mut slots: Vec<_> = (0..slots_n).map(|_| b.zeros(SHAPE, DType::F32, M::OptimizerState).unwrap()).collect();
    let mut w16 = b.zeros(SHAPE, dt, M::Parameters).unwrap();
    let mut state = b.zeros([1, scaler::STATE_WORDS], DType::U32, M::Other).unwrap();
    b.write_u32(&mut state, &scaler::state_words(c.init_scale, 0, 0)).unwrap();
    let mut log = b.zeros([1, 16], DType::U32, M::Other).unwrap();
    let mut table = b.zeros([1, 2 * STEPS as usize], DType::F32, M::OptimizerState).unwrap();
    b.write_f32(&mut table, &scaler::adam_factor_table(adamw, STEPS as usize)).unwrap();
    for step in 1..=STEPS {
        b.write_f32(&mut g, &grads(step)).unwrap();
        b.unscale_check(&mut g, &mut state).unwrap();
        let opt = if adam { AmpOptimizer::AdamW(adamw, &table) } else { AmpOptimizer::Sgd(sgd) };
        b.amp_update(&mut p, &g, &mut slots, opt, &state, Some(&mut w16)).unwrap();
        b.scaler_update(&mut state, rule(c), &mut log, step as usize - 1).unwrap();
    }
    let words = b.read_u32(&state).unwrap();
    let entries = b.read_u32(&log).unwrap();
    let got_p = b.read_f32(&p).unwrap();
    let got_slots: Vec<Vec<f32>> = slots.iter().map(|s| b.read_f32(s).unwrap()).collect();
    let got_w16 = b.read_f32(&w16).unwrap();

    // Per step, as before: the host reads the flag and decides; t counts the steps taken.
    let mut host = GradScaler::new(c).unwrap();
    let mut rp = b.upload_f32(&init, SHAPE, M::Parameters).unwrap();
    let mut rg = b.zeros(SHAPE, DType::F32, M::Gradients).unwrap();
    let mut rs: Vec<_> = (0..slots_n).map(|_| b.zeros(SHAPE, DType::F32, M::OptimizerState).unwrap()).collect();
    let (mut taken, mut skipped) = (0u32, Vec::new());
    for step in 1..=STEPS {
        let want_entry = host.scale().to_bits() | if BAD.contains(&step) { SKIPPED_BIT } else { 0 };
        assert_eq!(entries[step as usize - 1], want_entry, "{what}: log entry of step {step}");
        let gs = grads(step);
        b.write_f32(&mut rg, &gs).unwrap();
        b.scale(&mut rg, host.inv_scale()).unwrap();
        let found = gs.iter().any(|v| !v.is_finite());
        if host.update(found) == gpulab::nn::ScalerStep::Skipped {
            skipped.push(step);
            continue;
        }
        taken += 1;
        match rs.as_mut_slice() {
            [v] => b.sgd_step(&mut rp, &rg, v, sgd).unwrap(),
            [m, v] => b.adamw_step(&mut rp, &rg, m, v, adamw, taken).unwrap(),
            _ => unreachable!(),
        }
    }
    assert_eq!(skipped, BAD.to_vec(), "{what}: the reference skips the injected steps");
    assert_eq!(words[word::SKIPPED] as usize, skipped.len(), "{what}: skipped count");
    assert_eq!(words[word::STEPS], taken, "{what}: optimizer steps (AdamW's t)");
    assert_eq!(
        f32::from_bits(words[word::SCALE]).to_bits(),
        host.scale().to_bits(),
        "{what}: final scale {} vs {}",
        f32::from_bits(words[word::SCALE]),
        host.scale()
    );
    assert_eq!(words[word::INV_SCALE], host.inv_scale().to_bits(), "{what}: inv_scale");
    assert_eq!(words[word::TRACKER], host.state.growth_tracker, "{what}: growth tracker");
    assert_eq!(words[word::FOUND_INF], 0, "{what}: the flag is cleared after each step");
    assert_eq!(bits(&got_p), bits(&b.read_f32(&rp).unwrap()), "{what}: master weights");
    for (i, s) in rs.iter().enumerate() {
        assert_eq!(bits(&got_slots[i]), bits(&b.read_f32(s).unwrap()), "{what}: optimizer state {i}");
    }
    let host16: Vec<f32> = float16::encode(dt, &got_p).into_iter().map(|h| float16::widen(dt, h)).collect();
    assert_eq!(bits(&got_w16), bits(&host16), "{what}: the fused 16-bit copy vs the host conversion");
}

fn sync_free_scaler_matches_the_per_step_path<B: Backend>(b: &mut B) {
    for dt in [DType::F16, DType::BF16] {
        if let Some(why) = b.amp_unavailable(dt) {
            eprintln!("{}: {} skipped: {why}", b.info().label(), dt.name());
            continue;
        }
        sequence(b, false, dt);
        sequence(b, true, dt);
    }
}

/// The device's reciprocal is the host's `inv_scale` for scales that are not powers of two.
fn scaler_update_reciprocal_is_exact<B: Backend>(b: &mut B) {
    let mut state = b.zeros([1, scaler::STATE_WORDS], DType::U32, M::Other).unwrap();
    let mut log = b.zeros([1, 1], DType::U32, M::Other).unwrap();
    let keep = ScalerRule { scaling: true, growth_factor: 2.0, backoff_factor: 0.5, growth_interval: u32::MAX, min_scale: 1e-30 };
    let scales: Vec<f32> = random(300, 5, 0.0, 1.0)
        .into_iter()
        .enumerate()
        .map(|(i, u)| (1.0 + u) * 2f32.powi(i as i32 % 200 - 60))
        .chain([3.0, 1e10, 65536.0, 1e30, 0.7])
        .collect();
    for s in scales {
        b.write_u32(&mut state, &scaler::state_words(s, 0, 0)).unwrap();
        b.scaler_update(&mut state, keep, &mut log, 0).unwrap();
        let w = b.read_u32(&state).unwrap();
        assert_eq!(w[word::SCALE], s.to_bits(), "no growth or backoff for {s}");
        assert_eq!(
            w[word::INV_SCALE],
            scaler::inv_scale(s).to_bits(),
            "1/{s}: {} vs {}",
            f32::from_bits(w[word::INV_SCALE]),
            scaler::inv_scale(s)
        );
    }
}

/// A training run that overflows: every step's logged scale equals the host GradScaler's replay
/// of the skipped steps, and the skips are exactly where the replay backs off.
fn training_scale_history_replays_on_the_host<B: Backend>(b: &mut B) {
    if b.amp_unavailable(DType::F16).is_some() {
        eprintln!("{}: f16 unavailable, skipped", b.info().label());
        return;
    }
    let data = data::load(&DatasetSpec::Digits, 42).unwrap();
    let mut amp = AmpConfig::new(Precision::F16);
    amp.scaler.init_scale = 1e9;
    amp.scaler.growth_interval = 4;
    // log_every 7 does not divide the epoch: windows end mid-epoch and at its end.
    let cfg = TrainConfig { hidden: vec![64], epochs: 2, batch: 64, log_every: 7, amp, ..TrainConfig::default() };
    let r = train(b, &data, &cfg, &mut NullSink).unwrap();
    let a = r.amp.expect("an fp16 run reports its scaler");
    assert_eq!(a.scale_history.len() as u64, r.steps, "one logged scale per step");
    assert!(a.skipped_steps.len() >= 3, "1e9 overflows until the scale backs off: {:?}", a.skipped_steps);
    let mut host = GradScaler::new(amp.scaler).unwrap();
    for (i, [step, scale]) in a.scale_history.iter().enumerate() {
        assert_eq!(*step as usize, i + 1);
        assert_eq!(*scale, host.scale() as f64, "step {step}");
        host.update(a.skipped_steps.contains(&(*step as u64)));
    }
}

backend_tests!(every: sync_free_scaler_matches_the_per_step_path, scaler_update_reciprocal_is_exact, training_scale_history_replays_on_the_host);
