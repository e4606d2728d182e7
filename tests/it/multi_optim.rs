//! Multi-tensor optimizer steps (issue 43): `optimizer_steps`, `unscale_checks` and `amp_updates`
//! over many parameters of odd sizes give the same bits as the per-parameter ops on the same
//! backend, agree with the CPU reference, and skip every update when one gradient overflows; on
//! the GPU they run fewer dispatches than parameters (several parameters per dispatch, as many as
//! the device's storage-buffer limit allows).

use gpulab::device::CpuBackend;
use gpulab::tensor::scaler::{self, AmpOptimizer, word};
use gpulab::tensor::{AdamW, Backend, BackendBase, DType, MemCategory as M, OptStep, ParamRefs, Sgd, Telemetry};

use crate::common::{assert_close, backend_tests, random, with_gpu};

const SGD: Sgd = Sgd { lr: 0.05, momentum: 0.9, weight_decay: 1e-2 };
const ADAMW: AdamW = AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 1e-2 };
const STEP: u32 = 7;
/// Parameter sizes: odd, either side of a 256-wide workgroup, one element, one large; 20 of
/// them, more than one dispatch binds on any adapter, so chunks and their remainder both run.
const SIZES: [usize; 20] = [1, 255, 257, 1003, 3, 40_001, 64, 2, 777, 5, 256, 9, 1, 4097, 31, 300, 7, 1000, 17, 129];
/// The first 12 parameters have 16-bit copies (weights), the rest none (biases).
const WITH_COPY: usize = 12;

#[derive(Clone, Copy, Debug)]
enum Mode {
    F32(bool),
    Amp(bool, DType),
}

struct Params<T> {
    p: Vec<T>,
    g: Vec<T>,
    state: Vec<Vec<T>>,
    w16: Vec<T>,
}

/// The parameters' starting point; `copy`: the type of the first `WITH_COPY` parameters' 16-bit
/// copies (none for an f32 step).
fn upload<B: Backend>(b: &mut B, adam: bool, copy: Option<DType>, inf_at: Option<usize>) -> Params<B::Tensor> {
    let mut out = Params { p: vec![], g: vec![], state: vec![], w16: vec![] };
    for (i, &n) in SIZES.iter().enumerate() {
        let seed = 500 + 10 * i as u64;
        let shape = [1, n];
        let mut g = random(n, seed + 1, -0.5, 0.5);
        if inf_at == Some(i) {
            g[n / 2] = f32::INFINITY;
        }
        out.p.push(b.upload_f32(&random(n, seed, -1.0, 1.0), shape, M::Parameters).unwrap());
        out.g.push(b.upload_f32(&g, shape, M::Gradients).unwrap());
        let mut slots = vec![b.upload_f32(&random(n, seed + 2, -0.2, 0.2), shape, M::OptimizerState).unwrap()];
        if adam {
            slots.push(b.upload_f32(&random(n, seed + 3, 0.0, 0.01), shape, M::OptimizerState).unwrap());
        }
        out.state.push(slots);
        if let Some(dt) = copy.filter(|_| i < WITH_COPY) {
            out.w16.push(b.zeros(shape, dt, M::Parameters).unwrap());
        }
    }
    out
}

fn refs<T>(ps: &mut Params<T>) -> Vec<ParamRefs<'_, T>> {
    let mut w16 = ps.w16.iter_mut();
    ps.p.iter_mut()
        .zip(&ps.g)
        .zip(ps.state.iter_mut())
        .map(|((value, grad), state)| ParamRefs { value, grad, state: state.as_mut_slice(), w16: w16.next() })
        .collect()
}

/// Every output after one step, multi-tensor or per parameter (`multi`): values, state, 16-bit
/// copies, gradients (unscaled by the mixed-precision step) and the scaler state words' FOUND_INF.
fn step<B: Backend>(b: &mut B, mode: Mode, multi: bool, inf_at: Option<usize>) -> Vec<Vec<f32>> {
    let (adam, copy) = match mode {
        Mode::F32(adam) => (adam, None),
        Mode::Amp(adam, dt) => (adam, Some(dt)),
    };
    let mut ps = upload(b, adam, copy, inf_at);
    let mut found = vec![];
    match mode {
        Mode::F32(_) => {
            let rule = if adam { OptStep::AdamW(ADAMW, STEP) } else { OptStep::Sgd(SGD) };
            if multi {
                b.optimizer_steps(&mut refs(&mut ps), rule).unwrap();
            } else {
                for r in refs(&mut ps) {
                    match r.state {
                        [v] => b.sgd_step(r.value, r.grad, v, SGD).unwrap(),
                        [m, v] => b.adamw_step(r.value, r.grad, m, v, ADAMW, STEP).unwrap(),
                        _ => unreachable!(),
                    }
                }
            }
        }
        Mode::Amp(..) => {
            // A loss scale of 4 (so unscaling changes the gradients) at the step count that
            // picks AdamW's factors for STEP.
            let mut state = b.zeros([1, scaler::STATE_WORDS], DType::U32, M::Other).unwrap();
            b.write_u32(&mut state, &scaler::state_words(4.0, 0, STEP - 1)).unwrap();
            let mut table = b.zeros([1, 2 * STEP as usize], DType::F32, M::OptimizerState).unwrap();
            b.write_f32(&mut table, &scaler::adam_factor_table(ADAMW, STEP as usize)).unwrap();
            let opt = if adam { AmpOptimizer::AdamW(ADAMW, &table) } else { AmpOptimizer::Sgd(SGD) };
            if multi {
                b.unscale_checks(&mut ps.g.iter_mut().collect::<Vec<_>>(), &mut state).unwrap();
                b.amp_updates(&mut refs(&mut ps), opt, &state).unwrap();
            } else {
                for g in ps.g.iter_mut() {
                    b.unscale_check(g, &mut state).unwrap();
                }
                for r in refs(&mut ps) {
                    b.amp_update(r.value, r.grad, r.state, opt, &state, r.w16).unwrap();
                }
            }
            found.push(vec![b.read_u32(&state).unwrap()[word::FOUND_INF] as f32]);
        }
    }
    let Params { p, g, state, w16 } = &ps;
    let tensors = p.iter().chain(state.iter().flatten()).chain(w16).chain(g);
    tensors.map(|t| b.read_f32(t).unwrap()).chain(found).collect()
}

fn modes<B: Backend>(b: &B) -> Vec<Mode> {
    let mut out = vec![Mode::F32(false), Mode::F32(true)];
    for dt in [DType::F16, DType::BF16] {
        if b.amp_unavailable(dt).is_none() {
            out.extend([Mode::Amp(false, dt), Mode::Amp(true, dt)]);
        }
    }
    out
}

fn bits(v: &[Vec<f32>]) -> Vec<Vec<u32>> {
    v.iter().map(|t| t.iter().map(|x| x.to_bits()).collect()).collect()
}

fn multi_tensor_steps_equal_the_per_parameter_ops<B: Backend>(b: &mut B) {
    let who = b.info().label();
    let mut cpu = CpuBackend::new();
    for mode in modes(b) {
        let multi = step(b, mode, true, None);
        let single = step(b, mode, false, None);
        assert_eq!(bits(&multi), bits(&single), "{who} {mode:?}: the multi-tensor step differs from the per-parameter ops");
        // The formulas' agreement in ulps is optimizer.rs's; here a relative bound catches a
        // parameter updated with another's buffers or sizes.
        let want = step(&mut cpu, mode, true, None);
        // The 16-bit copies round values that may differ in their last f32 bit: one 16-bit step.
        let (adam, copies) = match mode {
            Mode::F32(adam) => (adam, 0),
            Mode::Amp(adam, _) => (adam, WITH_COPY),
        };
        let copy_outputs = SIZES.len() * (2 + adam as usize)..SIZES.len() * (2 + adam as usize) + copies;
        for (i, (g, w)) in multi.iter().zip(&want).enumerate() {
            let tol = if copy_outputs.contains(&i) { 1e-2 } else { 1e-5 };
            assert_close(&format!("{who} {mode:?} output {i} vs the CPU"), g, w, tol);
        }
    }
}

/// One gradient of the last chunk overflows: every parameter keeps its value (the step is
/// skipped), the gradients are still unscaled, and the state says so — as per parameter.
fn an_overflow_in_any_gradient_skips_every_multi_tensor_update<B: Backend>(b: &mut B) {
    let who = b.info().label();
    for mode in modes(b).into_iter().filter(|m| matches!(m, Mode::Amp(..))) {
        let multi = step(b, mode, true, Some(SIZES.len() - 2));
        assert_eq!(multi.last(), Some(&vec![1.0]), "{who} {mode:?}: FOUND_INF");
        let single = step(b, mode, false, Some(SIZES.len() - 2));
        assert_eq!(bits(&multi), bits(&single), "{who} {mode:?}");
        let before = {
            let (adam, dt) = match mode {
                Mode::Amp(adam, dt) => (adam, dt),
                Mode::F32(_) => unreachable!(),
            };
            let ps = upload(b, adam, Some(dt), None);
            ps.p.iter().map(|t| b.read_f32(t).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&multi[..SIZES.len()]), bits(&before), "{who} {mode:?}: a skipped step changed a parameter");
    }
}

backend_tests!(every: multi_tensor_steps_equal_the_per_parameter_ops, an_overflow_in_any_gradient_skips_every_multi_tensor_update);

/// The multi-tensor kernels forced on: a CPU adapter (llvmpipe) runs the per-parameter
/// kernels by default, so the tests above compare them with themselves there.
#[test]
fn the_multi_tensor_kernels_equal_the_per_parameter_ops_on_any_adapter() {
    with_gpu("the_multi_tensor_kernels_equal_the_per_parameter_ops_on_any_adapter", |gpu| {
        let before = gpu.multi_tensor();
        gpu.set_multi_tensor(true);
        multi_tensor_steps_equal_the_per_parameter_ops(gpu);
        an_overflow_in_any_gradient_skips_every_multi_tensor_update(gpu);
        gpu.set_multi_tensor(before);
    });
}

/// With the multi-tensor path on (any adapter but a CPU's; forced here) one dispatch updates as
/// many parameters as the device binds: 20 parameters take ⌈20 / slots⌉ dispatches, not 20
/// (the per-parameter ops' count, which this test fails on).
#[test]
fn a_gpu_updates_many_parameters_per_dispatch() {
    with_gpu("a_gpu_updates_many_parameters_per_dispatch", |gpu| {
        let multi = gpu.multi_tensor();
        gpu.set_multi_tensor(true);
        let limit = gpu.storage_buffers_per_dispatch() as usize;
        for (mode, per_slot) in [(Mode::F32(false), 3), (Mode::F32(true), 4)] {
            let slots = (limit / per_slot).min(16);
            let before = gpu.counts().unwrap();
            step(gpu, mode, true, None);
            let c = gpu.counts().unwrap().since(&before);
            // Uploads and reads dispatch nothing (an f32 step makes no 16-bit copies).
            let want = if slots >= 2 { SIZES.len().div_ceil(slots) } else { SIZES.len() };
            assert_eq!(c.dispatches as usize, want, "{mode:?}: {slots} parameters per dispatch on a limit of {limit}: {c:?}");
            assert!(slots < 2 || want < SIZES.len());
        }
        gpu.set_multi_tensor(multi);
    });
}

/// A CPU adapter keeps one dispatch per parameter, which measured faster there (`cargo bench
/// -- optim`); any other adapter takes the multi-tensor path.
#[test]
fn a_cpu_adapter_updates_one_parameter_per_dispatch() {
    with_gpu("a_cpu_adapter_updates_one_parameter_per_dispatch", |gpu| {
        let info = gpu.info();
        let cpu = info.software || info.device_type == "Cpu";
        assert_eq!(gpu.multi_tensor(), !cpu, "{}", gpu.info().label());
        assert_eq!(gpu.split_reductions(), !cpu, "{}", gpu.info().label());
        if cpu {
            let before = gpu.counts().unwrap();
            step(gpu, Mode::F32(false), true, None);
            assert_eq!(gpu.counts().unwrap().since(&before).dispatches as usize, SIZES.len());
        }
    });
}
