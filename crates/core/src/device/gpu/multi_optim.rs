//! Multi-tensor optimizer steps (issue 43): one dispatch updates, or unscales, up to
//! `MAX_SLOTS` parameters, each still in its own buffers, instead of one dispatch per parameter.
//! A dispatch binds each parameter's buffers (value, gradient, state, 16-bit copy), so how many
//! fit is set by the device's storage-buffer limit (limits.rs requests the adapter's); where
//! fewer than two fit, or a run has one parameter, the per-parameter kernels run, and on a CPU
//! adapter too, where one dispatch per parameter measured faster (`multi_tensor`). The WGSL
//! (shaders/multi_optimizer.wgsl) is generated here per kernel and slot count, each element
//! computed by the per-parameter kernels' formulas, so every result is the same bits.

use super::kernels::{Kernel, PipelineKey};
use super::{GpuBackend, GpuTensor, amp, u32_len};
use crate::error::Result;
use crate::tensor::scaler::AmpOptimizer;
use crate::tensor::{CoreOps, DType, OptStep, ParamRefs, TensorMeta, checks};

/// Parameters one dispatch updates at most: the parameter block holds 16 (end, count) pairs.
pub const MAX_SLOTS: usize = 16;
/// Words of the parameter block before the slot table (the per-parameter kernels' layout).
const HYPER_WORDS: usize = 16;
/// Variant bit: the slots write 16-bit copies (the mixed-precision weights; not biases).
const W16_BIT: u32 = 1 << 5;

/// The multi-tensor kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Multi {
    Sgd,
    AdamW,
    AmpSgd,
    AmpAdamW,
    Unscale,
}

impl Multi {
    pub fn kernel(self) -> Kernel {
        match self {
            Multi::Sgd => Kernel::MultiSgd,
            Multi::AdamW => Kernel::MultiAdamW,
            Multi::AmpSgd => Kernel::MultiAmpSgd,
            Multi::AmpAdamW => Kernel::MultiAmpAdamW,
            Multi::Unscale => Kernel::MultiUnscale,
        }
    }

    fn of(kernel: Kernel) -> Option<Multi> {
        [Multi::Sgd, Multi::AdamW, Multi::AmpSgd, Multi::AmpAdamW, Multi::Unscale].into_iter().find(|m| m.kernel() == kernel)
    }

    fn amp(self) -> bool {
        matches!(self, Multi::AmpSgd | Multi::AmpAdamW)
    }

    fn adam(self) -> bool {
        matches!(self, Multi::AdamW | Multi::AmpAdamW)
    }

    /// Storage buffers each slot binds: value, gradient and state (the gradient alone to
    /// unscale), and the 16-bit copy.
    fn per_slot(self, w16: bool) -> u32 {
        match self {
            Multi::Unscale => 1,
            _ => 3 + self.adam() as u32 + w16 as u32,
        }
    }

    /// Storage buffers bound once: the scaler state, and AdamW's factor table.
    fn shared(self) -> u32 {
        match self {
            Multi::Sgd | Multi::AdamW => 0,
            Multi::AmpSgd | Multi::Unscale => 1,
            Multi::AmpAdamW => 2,
        }
    }
}

impl GpuBackend {
    /// Storage buffers one dispatch may bind on this device: its storage-buffer limit, and its
    /// limit on all buffers of a stage less the parameter block's uniform.
    pub fn storage_buffers_per_dispatch(&self) -> u32 {
        let l = self.device.limits();
        l.max_storage_buffers_per_shader_stage.min(l.max_buffers_and_acceleration_structures_per_shader_stage.saturating_sub(1))
    }

    /// Parameters one dispatch of `m` updates here: 1 (the per-parameter kernels) where the
    /// multi-tensor path is off (a CPU adapter, `set_multi_tensor`).
    fn slots_here(&self, m: Multi, w16: bool) -> usize {
        if !self.multi_tensor() {
            return 1;
        }
        slots(m, w16, self.storage_buffers_per_dispatch()).max(1)
    }
}

/// Parameters one dispatch of `m` binds on a device allowing `limit` storage buffers per stage.
pub fn slots(m: Multi, w16: bool, limit: u32) -> usize {
    ((limit.saturating_sub(m.shared()) / m.per_slot(w16)) as usize).min(MAX_SLOTS)
}

fn variant(slots: usize, w16: bool) -> u32 {
    slots as u32 | if w16 { W16_BIT } else { 0 }
}

/// The generated parts of a multi-tensor kernel's WGSL (MULTI_BINDINGS, MULTI_FNS, MULTI_BODY);
/// empty for every other kernel.
pub fn template_values(key: PipelineKey) -> [(&'static str, String); 3] {
    let Some(m) = Multi::of(key.kernel) else {
        return [("MULTI_BINDINGS", String::new()), ("MULTI_FNS", String::new()), ("MULTI_BODY", String::new())];
    };
    let k = (key.variant & (W16_BIT - 1)) as usize;
    let w16 = key.variant & W16_BIT != 0;
    let (mut binds, mut fns, mut body) = (String::new(), String::new(), String::new());
    let storage = |b: u32, access: &str, name: String, ty: &str| format!("@group(0) @binding({b}) var<storage, {access}> {name}: {ty};\n");
    match m {
        Multi::Unscale => binds += &storage(1, "read_write", "state".into(), "array<atomic<u32>>"),
        Multi::AmpSgd | Multi::AmpAdamW => {
            binds += &storage(1, "read", "state".into(), "array<u32>");
            if m.adam() {
                binds += &storage(2, "read", "table".into(), "array<f32>");
            }
            // The float16 helpers' underflow counts, which these kernels never take.
            binds += &storage(127, "read_write", "stats".into(), "array<atomic<u32>>");
        }
        Multi::Sgd | Multi::AdamW => {}
    }
    // Where a slot's buffers start, and their names in binding order.
    let names: &[&str] = match m {
        Multi::Unscale => &["g"],
        Multi::Sgd | Multi::AmpSgd => &["p", "g", "v"],
        Multi::AdamW | Multi::AmpAdamW => &["p", "g", "m", "v"],
    };
    let first = 1 + m.shared();
    for j in 0..k {
        let base = first + j as u32 * m.per_slot(w16);
        for (r, name) in names.iter().enumerate() {
            let (access, ty) = match (*name, m) {
                ("g", Multi::Unscale) => ("read_write", "array<u32>"),
                ("g", _) => ("read", "array<f32>"),
                _ => ("read_write", "array<f32>"),
            };
            binds += &storage(base + r as u32, access, format!("{name}{j}"), ty);
        }
        if w16 {
            binds += &storage(base + names.len() as u32, "read_write", format!("w{j}"), "array<u32>");
        }
        fns += &match m {
            Multi::Unscale => format!(
                "fn upd{j}(i: u32) {{\n    let bits = g{j}[i];\n    if (bits & 0x7f800000u) == 0x7f800000u {{ atomicStore(&state[5], 1u); }}\n    \
                 g{j}[i] = bitcast<u32>(bitcast<f32>(bits) * bitcast<f32>(atomicLoad(&state[1])));\n}}\n"
            ),
            Multi::Sgd | Multi::AmpSgd => format!(
                "fn upd{j}(i: u32, step_size: f32, bias2_sqrt: f32) -> f32 {{\n    \
                 let r = sgd_update(p{j}[i], g{j}[i], v{j}[i], p.lr, p.momentum, p.weight_decay);\n    \
                 p{j}[i] = r.x;\n    v{j}[i] = r.y;\n    return r.x;\n}}\n"
            ),
            Multi::AdamW | Multi::AmpAdamW => format!(
                "fn upd{j}(i: u32, step_size: f32, bias2_sqrt: f32) -> f32 {{\n    \
                 let r = adamw_update(p{j}[i], g{j}[i], m{j}[i], v{j}[i], p.beta1, p.beta2, p.eps, p.decay, step_size, bias2_sqrt);\n    \
                 p{j}[i] = r.x;\n    m{j}[i] = r.y;\n    v{j}[i] = r.z;\n    return r.x;\n}}\n"
            ),
        };
    }
    // The overflow skip and AdamW's bias correction, as the per-parameter kernels take them.
    body += match m {
        Multi::Unscale => "",
        Multi::Sgd => "    let ss = 0.0;\n    let b2 = 0.0;\n",
        Multi::AdamW => "    let ss = p.step_size;\n    let b2 = p.bias2_sqrt;\n",
        Multi::AmpSgd => "    if state[5] != 0u { return; }\n    let ss = 0.0;\n    let b2 = 0.0;\n",
        Multi::AmpAdamW => {
            "    if state[5] != 0u { return; }\n    let row = state[4];\n    let ss = table[2u * row];\n    let b2 = table[2u * row + 1u];\n"
        }
    };
    let at = |table: &str, j: usize| format!("p.{table}[{}u][{}u]", j / 4, j % 4);
    for j in 0..k {
        let start = if j == 0 { "0u".to_string() } else { at("ends", j - 1) };
        let (end, n) = (at("ends", j), at("counts", j));
        let elem = match m {
            Multi::Unscale => format!("        if i < {n} {{ upd{j}(i); }}\n"),
            Multi::Sgd | Multi::AdamW => format!("        if i < {n} {{ _ = upd{j}(i, ss, b2); }}\n"),
            // One invocation per 16-bit word: two elements (a missing odd one is +0).
            _ => {
                let store = if w16 {
                    format!("            w{j}[i] = half_store_pair(bitcast<u32>(x0), bitcast<u32>(x1), false);\n")
                } else {
                    String::new()
                };
                format!(
                    "        let e = 2u * i;\n        if e < {n} {{\n            let x0 = upd{j}(e, ss, b2);\n            var x1 = 0.0;\n            \
                     if e + 1u < {n} {{ x1 = upd{j}(e + 1u, ss, b2); }}\n{store}        }}\n"
                )
            }
        };
        body += &format!("    if w < {end} {{\n        let i = (w - {start}) * {{{{WG}}}}u + li;\n{elem}        return;\n    }}\n");
    }
    [("MULTI_BINDINGS", binds), ("MULTI_FNS", fns), ("MULTI_BODY", body)]
}

/// One slot: its buffers in binding order and its element count.
struct Slot<'a> {
    buffers: Vec<&'a wgpu::Buffer>,
    n: usize,
}

/// Records one dispatch of `m` over `slots` (at most `MAX_SLOTS`) with the hyper-parameter words
/// `hyper` (the per-parameter kernel's block) and the `shared` buffers.
fn dispatch(
    gpu: &mut GpuBackend,
    m: Multi,
    dtype: DType,
    w16: bool,
    hyper: &[u32],
    shared: &[&wgpu::Buffer],
    slots: &[Slot],
) -> Result<()> {
    let wg = gpu.pipelines.wg() as usize;
    let per_invocation = if m.amp() { 2 } else { 1 };
    let mut params = [0u32; HYPER_WORDS + 2 * MAX_SLOTS];
    params[..hyper.len()].copy_from_slice(hyper);
    let mut end = 0usize;
    for (j, s) in slots.iter().enumerate() {
        end += s.n.div_ceil(per_invocation).div_ceil(wg);
        params[HYPER_WORDS + j] = u32_len(end, "optimizer step")?;
        params[HYPER_WORDS + MAX_SLOTS + j] = u32_len(s.n, "optimizer step")?;
    }
    let bindings: Vec<(u32, &wgpu::Buffer)> = shared
        .iter()
        .copied()
        .chain(slots.iter().flat_map(|s| s.buffers.iter().copied()))
        .enumerate()
        .map(|(i, b)| (1 + i as u32, b))
        .collect();
    let grid = gpu.grid(end * wg);
    gpu.run_as(dtype, m.kernel(), variant(slots.len(), w16), &params, &bindings, grid)
}

/// The f32 step's parameter words, as `sgd_step`/`adamw_step` (core.rs) fill them.
fn f32_hyper(rule: OptStep) -> Vec<u32> {
    match rule {
        OptStep::Sgd(hp) => vec![0, hp.lr.to_bits(), hp.momentum.to_bits(), hp.weight_decay.to_bits()],
        OptStep::AdamW(hp, step) => {
            let f = hp.factors(step);
            [0.0, hp.lr, 0.0, hp.weight_decay, hp.beta1, hp.beta2, hp.eps, f.decay, f.step_size, f.bias2_sqrt].map(f32::to_bits).to_vec()
        }
    }
}

pub fn optimizer_steps(gpu: &mut GpuBackend, params: &mut [ParamRefs<'_, GpuTensor>], rule: OptStep) -> Result<()> {
    const OP: &str = "optimizer_steps";
    for p in params.iter() {
        checks::opt_slots(OP, p.state.len(), rule.slots())?;
        checks::f32(OP, &*p.value)?;
        checks::same_shape(OP, &*p.value, p.grad)?;
        for s in p.state.iter() {
            checks::same_shape(OP, &*p.value, s)?;
        }
        u32_len(p.value.numel(), OP)?;
    }
    let m = if rule.slots() == 1 { Multi::Sgd } else { Multi::AdamW };
    let k = gpu.slots_here(m, false);
    let hyper = f32_hyper(rule);
    for chunk in params.chunks_mut(k) {
        if chunk.len() == 1 {
            let p = &mut chunk[0];
            match (rule, &mut *p.state) {
                (OptStep::Sgd(hp), [v]) => gpu.sgd_step(p.value, p.grad, v, hp)?,
                (OptStep::AdamW(hp, step), [mo, v]) => gpu.adamw_step(p.value, p.grad, mo, v, hp, step)?,
                _ => unreachable!("opt_slots checked the state count"),
            }
            continue;
        }
        let slots: Vec<Slot> = chunk
            .iter()
            .map(|p| {
                let mut buffers = vec![p.value.buffer(), p.grad.buffer()];
                buffers.extend(p.state.iter().map(|s| s.buffer()));
                Slot { buffers, n: p.value.numel() }
            })
            .collect();
        dispatch(gpu, m, DType::F32, false, &hyper, &[], &slots)?;
    }
    Ok(())
}

/// Compiles the pipelines `optimizer_steps` runs for `params` parameters.
pub fn prepare_optimizer_steps(gpu: &mut GpuBackend, params: usize, rule: OptStep) -> Result<()> {
    let m = if rule.slots() == 1 { Multi::Sgd } else { Multi::AdamW };
    let k = gpu.slots_here(m, false);
    for n in [k.min(params), params % k] {
        if n >= 2 {
            gpu.pipelines.get(&gpu.device, PipelineKey { kernel: m.kernel(), dtype: DType::F32, variant: variant(n, false) })?;
        }
    }
    Ok(())
}

pub fn unscale_checks(gpu: &mut GpuBackend, grads: &mut [&mut GpuTensor], state: &mut GpuTensor) -> Result<()> {
    for g in grads.iter() {
        checks::unscale_check(&**g, &*state)?;
        u32_len(g.numel(), "unscale_check")?;
    }
    let k = gpu.slots_here(Multi::Unscale, false);
    for chunk in grads.chunks_mut(k) {
        if let [g] = chunk {
            amp::unscale_check(gpu, g, state)?;
            continue;
        }
        let slots: Vec<Slot> = chunk.iter().map(|g| Slot { buffers: vec![g.buffer()], n: g.numel() }).collect();
        dispatch(gpu, Multi::Unscale, DType::F32, false, &[], &[state.buffer()], &slots)?;
    }
    Ok(())
}

pub fn amp_updates(
    gpu: &mut GpuBackend,
    params: &mut [ParamRefs<'_, GpuTensor>],
    opt: AmpOptimizer<'_, GpuTensor>,
    state: &GpuTensor,
) -> Result<()> {
    // The 16-bit type of each parameter's copy (a parameter without one runs the bf16 instance,
    // as amp_update does), checked before anything is recorded.
    let mut types = Vec::with_capacity(params.len());
    for p in params.iter() {
        let dt = checks::amp_update(&*p.value, p.grad, &*p.state, &opt, state, p.w16.as_deref())?;
        let run_as = dt.unwrap_or(DType::BF16);
        amp::ensure_available(gpu, "amp_update", run_as)?;
        u32_len(p.value.numel(), "amp_update")?;
        types.push((run_as, dt.is_some()));
    }
    let (m, hyper, table) = match opt {
        AmpOptimizer::Sgd(hp) => (Multi::AmpSgd, [0.0, hp.lr, hp.momentum, hp.weight_decay, 0.0, 0.0, 0.0, 0.0], None),
        AmpOptimizer::AdamW(hp, table) => (
            Multi::AmpAdamW,
            [0.0, hp.lr, 0.0, hp.weight_decay, hp.beta1, hp.beta2, hp.eps, 1.0 - hp.lr * hp.weight_decay],
            Some(table.buffer()),
        ),
    };
    let mut hyper = hyper.map(f32::to_bits).to_vec();
    // Runs of parameters of one kind (16-bit type, whether a copy is written), each in chunks.
    let mut start = 0;
    while start < params.len() {
        let kind = types[start];
        let (dt, w16) = kind;
        let k = gpu.slots_here(m, w16);
        let len = types[start..].iter().take_while(|&&t| t == kind).count().min(k);
        let chunk = &mut params[start..start + len];
        start += len;
        if let [p] = chunk {
            amp::amp_update(gpu, p.value, p.grad, p.state, opt, state, p.w16.as_deref_mut())?;
            continue;
        }
        hyper.resize(8, 0);
        hyper.push(w16 as u32);
        let slots: Vec<Slot> = chunk
            .iter()
            .map(|p| {
                let mut buffers = vec![&*p.value, p.grad].into_iter().map(|t| t.buffer()).collect::<Vec<_>>();
                buffers.extend(p.state.iter().map(|s| s.buffer()));
                buffers.extend(p.w16.as_deref().map(|w| w.buffer()));
                Slot { buffers, n: p.value.numel() }
            })
            .collect();
        let shared: Vec<&wgpu::Buffer> = std::iter::once(state.buffer()).chain(table).collect();
        dispatch(gpu, m, dt, w16, &hyper, &shared, &slots)?;
    }
    Ok(())
}
