//! The f32 ops and host transfers of the wgpu backend (`CoreOps`): validate with
//! `tensor::checks`, then record a dispatch.

use super::kernels::{Kernel, PipelineKey};
use super::tuning::MatmulVariant;
use super::{GpuBackend, GpuTensor, ROWWISE_MAX_COLS, amp, u32_len};
use crate::error::Result;
use crate::tensor::{AdamW, CoreOps, DType, HostData, MemCategory, OptStep, ParamRefs, Sgd, Shape, TensorMeta, checks};

/// Workgroups a split reduction aims for: 4 per compute unit of a 30-unit GPU, and more.
pub(super) const SPLIT_TARGET: usize = 128;
/// The shortest slice of a split reduction: shorter ones cost more in the second pass than
/// they save.
const MIN_SLICE: usize = 64;

/// Slices to cut a reduction of length `len` into when its output has `tiles` workgroups of
/// its own: enough for `SPLIT_TARGET` workgroups in all, none shorter than `MIN_SLICE`; 1 when
/// the output alone fills the GPU or the reduction is short.
pub(super) fn split_k(tiles: usize, len: usize) -> usize {
    if tiles >= SPLIT_TARGET || len < 2 * MIN_SLICE {
        return 1;
    }
    SPLIT_TARGET.div_ceil(tiles.max(1)).min(len / MIN_SLICE).max(1)
}

/// The checks softmax_xent and the fused loss step share (one function, so the two cannot
/// drift apart): labels for every row, a per-row loss vector, a gradient shaped like the
/// logits, and shapes that fit the kernels' u32 parameters. Returns (rows, cols).
fn softmax_xent_checks(logits: &GpuTensor, labels: &GpuTensor, loss_rows: &GpuTensor, grad: Option<&GpuTensor>) -> Result<(u32, u32)> {
    checks::labels("softmax_xent", logits, labels)?;
    let [rows, cols] = logits.shape;
    checks::vector_out("softmax_xent", loss_rows, rows, DType::F32)?;
    if let Some(g) = grad {
        checks::same_shape("softmax_xent", g, logits)?;
    }
    Ok((u32_len(rows, "softmax_xent")?, u32_len(cols, "softmax_xent")?))
}

impl GpuBackend {
    /// Whether `accumulate_sum`, `count_correct` and `sum_rows` split long inputs over
    /// workgroups (any adapter but a CPU's) or run in one workgroup: tests check the split
    /// kernels on llvmpipe, and benchmarks time both forms in one process (`cargo bench -- optim`).
    pub fn set_split_reductions(&mut self, on: bool) {
        self.split_reductions = on;
    }

    pub fn split_reductions(&self) -> bool {
        self.split_reductions
    }

    /// Whether the optimizer and unscaling update several parameters per dispatch (any
    /// adapter but a CPU's) or run the per-parameter kernels; as `set_split_reductions`.
    pub fn set_multi_tensor(&mut self, on: bool) {
        self.multi_tensor = on;
    }

    pub fn multi_tensor(&self) -> bool {
        self.multi_tensor
    }

    /// out (+)= Σ_s part[s, ..]: the second pass of a split reduction, in slice order.
    pub(super) fn sum_slices(&mut self, part: &GpuTensor, out: &mut GpuTensor, acc: bool) -> Result<()> {
        let [slices, n] = part.shape;
        let g = self.grid(n);
        let params = [u32_len(slices, "sum")?, u32_len(n, "sum")?, 0, acc as u32];
        self.run(Kernel::SumSlices, 0, &params, &[(1, part.buffer()), (2, out.buffer())], g)
    }
}

impl CoreOps for GpuBackend {
    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<GpuTensor> {
        // Pooled buffers hold old data, so every new tensor is cleared on the device.
        let t = self.alloc(shape, dtype, cat)?;
        let n = u32_len(t.words(), "zeros")?;
        self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, 0], &[(3, t.buffer())])?;
        Ok(t)
    }

    fn empty(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<GpuTensor> {
        self.alloc(shape, dtype, cat)
    }

    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<GpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        let t = self.alloc(shape, DType::F32, cat)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<GpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        let t = self.alloc(shape, DType::U32, cat)?;
        self.write_bytes(&t, bytemuck::cast_slice(data))?;
        Ok(t)
    }

    fn write_f32(&mut self, t: &mut GpuTensor, data: &[f32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        if t.dtype.is_16bit() {
            let words = amp::pack_words(t.dtype, data);
            return self.write_bytes(t, bytemuck::cast_slice(&words));
        }
        checks::f32("write", t)?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn write_u32(&mut self, t: &mut GpuTensor, data: &[u32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        checks::dtype("write", t, DType::U32)?;
        self.write_bytes(t, bytemuck::cast_slice(data))
    }

    fn read_f32(&mut self, t: &GpuTensor) -> Result<Vec<f32>> {
        if t.dtype.is_16bit() {
            let words: Vec<u32> = self.read_bytes(t)?;
            return Ok(amp::unpack_words(t.dtype, &words, t.numel()));
        }
        checks::f32("read", t)?;
        self.read_bytes(t)
    }

    fn read_u32(&mut self, t: &GpuTensor) -> Result<Vec<u32>> {
        checks::dtype("read", t, DType::U32)?;
        self.read_bytes(t)
    }

    fn read_many(&mut self, ts: &[&GpuTensor]) -> Result<Vec<HostData>> {
        self.read_batched(ts)
    }

    fn matmul(&mut self, a: &GpuTensor, b: &GpuTensor, c: &mut GpuTensor, ta: bool, tb: bool, acc: bool) -> Result<()> {
        let (m, n, k) = checks::matmul(a, b, c, ta, tb)?;
        // The variant tuned for this shape's class (tuning.rs).
        let chosen = self.matmul.get(m, n, k);
        if ta && chosen == MatmulVariant::RegBlock {
            // Reading a transposed A is pathologically slow for the register-blocked kernel on
            // llvmpipe (~16 ms per submit, measured); transposing it first costs one cheap pass.
            let mut at = self.alloc([m, k], DType::F32, MemCategory::Activations)?;
            self.transpose(a, &mut at)?;
            return self.matmul(&at, b, c, false, tb, acc);
        }
        let (m32, n32, k32) = (u32_len(m, "matmul")?, u32_len(n, "matmul")?, u32_len(k, "matmul")?);
        // The tiled kernel splits a long K over slices when its output has too few tiles.
        let split = match chosen {
            MatmulVariant::Tiled => split_k(m.div_ceil(64) * n.div_ceil(64), k),
            MatmulVariant::RegBlock => 1,
        };
        let k_len = if split > 1 { k.div_ceil(split).next_multiple_of(16) } else { k.max(1) };
        let split = k.div_ceil(k_len).max(1);
        let (kernel, groups) = match chosen {
            // 16 rows × 8 columns per invocation, 8 invocations side by side.
            MatmulVariant::RegBlock => (Kernel::MatmulRegBlock, (n32.div_ceil(64), m32.div_ceil(16))),
            MatmulVariant::Tiled => (Kernel::MatmulTiled, (n32.div_ceil(64), m32.div_ceil(64) * split as u32)),
        };
        let max = self.summary.limits.max_compute_workgroups_per_dimension;
        if groups.0 > max || groups.1 > max {
            return Err(
                self.beyond_limits("matmul", format!("a {m}×{n} output needs more workgroups than it allows ({max} per dimension)"))
            );
        }
        // vec4 loads of A / B where the row length along the loaded dimension allows them.
        let va = if ta { m % 4 == 0 } else { k % 4 == 0 };
        let vb = if tb { k % 4 == 0 } else { n % 4 == 0 };
        let variant = ta as u32 | (tb as u32) << 1 | (va as u32) << 2 | (vb as u32) << 3;
        let m_tiles = m32.div_ceil(64).max(1);
        if split == 1 {
            let params = [m32, n32, k32, acc as u32, k_len as u32, m_tiles, 0, 0];
            return self.run(kernel, variant, &params, &[(1, a.buffer()), (2, b.buffer()), (3, c.buffer())], groups);
        }
        // Each slice's partial product, then the slices added in order into C.
        let part = self.alloc([split, m * n], DType::F32, MemCategory::Activations)?;
        let params = [m32, n32, k32, 0, k_len as u32, m_tiles, 1, 0];
        self.run(kernel, variant, &params, &[(1, a.buffer()), (2, b.buffer()), (3, part.buffer())], groups)?;
        self.sum_slices(&part, c, acc)
    }

    fn bias_add(&mut self, y: &mut GpuTensor, bias: &GpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let n = u32_len(y.numel(), "bias_add")?;
        self.elementwise(Kernel::BiasAdd, n as usize, [n, y.shape[1] as u32, 0, 0], &[(1, y.buffer()), (2, bias.buffer())])
    }

    fn bias_relu(&mut self, y: &mut GpuTensor, bias: &GpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let n = u32_len(y.numel(), "bias_relu")?;
        self.elementwise(Kernel::BiasAdd, n as usize, [n, y.shape[1] as u32, 0, 1], &[(1, y.buffer()), (2, bias.buffer())])
    }

    fn relu(&mut self, x: &mut GpuTensor) -> Result<()> {
        checks::f32("relu", x)?;
        let n = u32_len(x.numel(), "relu")?;
        self.elementwise(Kernel::Relu, n as usize, [n, 0, 0, 0], &[(1, x.buffer())])
    }

    fn relu_backward(&mut self, grad: &mut GpuTensor, act: &GpuTensor) -> Result<()> {
        checks::same_shape("relu_backward", grad, act)?;
        checks::f32("relu_backward", grad)?;
        let n = u32_len(grad.numel(), "relu_backward")?;
        self.elementwise(Kernel::ReluBackward, n as usize, [n, 0, 0, 0], &[(1, grad.buffer()), (2, act.buffer())])
    }

    fn softmax_xent(
        &mut self,
        logits: &GpuTensor,
        labels: &GpuTensor,
        loss_rows: &mut GpuTensor,
        grad: Option<&mut GpuTensor>,
        grad_scale: f32,
    ) -> Result<()> {
        let (rows, cols) = softmax_xent_checks(logits, labels, loss_rows, grad.as_deref())?;
        let write_grad = grad.is_some() as u32;
        let grad_buf = grad.map(|g| g.buffer().clone()).unwrap_or_else(|| self.dummy.clone());
        let params = [rows, cols, grad_scale.to_bits(), write_grad];
        let bindings = [(1, logits.buffer()), (2, labels.buffer()), (3, loss_rows.buffer()), (4, &grad_buf)];
        // Narrow rows: a thread per row beats a workgroup per row with its barriers.
        if cols as usize <= ROWWISE_MAX_COLS {
            let g = self.grid(rows as usize);
            self.run(Kernel::SoftmaxXentRowwise, 0, &params, &bindings, g)
        } else {
            let g = self.rows_grid(rows as usize);
            self.run(Kernel::SoftmaxXent, 0, &params, &bindings, g)
        }
    }

    fn loss_step(
        &mut self,
        logits: &GpuTensor,
        labels: &GpuTensor,
        loss_rows: &mut GpuTensor,
        grad: Option<&mut GpuTensor>,
        grad_scale: f32,
        loss_sum: &mut GpuTensor,
        correct: &mut GpuTensor,
    ) -> Result<()> {
        let [rows, cols] = logits.shape;
        // One dispatch where a row fits an invocation and the batch one workgroup (as the
        // row-wise kernel and the totals' single-workgroup sums would run it anyway), and the
        // adapter binds its six storage buffers (GLES guarantees four: the three ops then).
        let binds_six = self.summary.limits.max_storage_buffers_per_shader_stage >= 6;
        if cols > ROWWISE_MAX_COLS || rows > self.pipelines.wg() as usize || !binds_six {
            self.softmax_xent(logits, labels, loss_rows, grad, grad_scale)?;
            self.accumulate_sum(loss_rows, loss_sum, 0)?;
            return self.count_correct(logits, labels, correct, 0);
        }
        let (rows, cols) = softmax_xent_checks(logits, labels, loss_rows, grad.as_deref())?;
        checks::acc_index("accumulate_sum", loss_sum, 0, DType::F32)?;
        checks::acc_index("count_correct", correct, 0, DType::U32)?;
        let write_grad = grad.is_some() as u32;
        let grad_buf = grad.map(|g| g.buffer().clone()).unwrap_or_else(|| self.dummy.clone());
        let params = [rows, cols, grad_scale.to_bits(), write_grad];
        let bindings = [
            (1, logits.buffer()),
            (2, labels.buffer()),
            (3, loss_rows.buffer()),
            (4, &grad_buf),
            (5, loss_sum.buffer()),
            (6, correct.buffer()),
        ];
        self.run(Kernel::SoftmaxXentTotals, 0, &params, &bindings, (1, 1))
    }

    fn sum_cols(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::vector_out("sum_cols", out, x.shape[1], DType::F32)?;
        if x.dtype.is_16bit() {
            return amp::sum_cols16(self, x, out);
        }
        checks::f32("sum_cols", x)?;
        let [r, c] = x.shape;
        // The split pass needs 64 columns × at least one row lane per workgroup.
        let split = if self.pipelines.wg() >= 64 { split_k(c.div_ceil(64), r) } else { 1 };
        if split > 1 {
            // Long and narrow (a bias gradient over batch × height × width): 64 columns × a
            // slice of rows per workgroup, then the slices added.
            let len = r.div_ceil(split);
            let split = r.div_ceil(len);
            let part = self.alloc([split, c], DType::F32, MemCategory::Activations)?;
            let params = [u32_len(r, "sum_cols")?, u32_len(c, "sum_cols")?, len as u32, 0];
            self.run(Kernel::SumColsPart, 0, &params, &[(1, x.buffer()), (2, part.buffer())], (c.div_ceil(64) as u32, split as u32))?;
            return self.sum_slices(&part, out, false);
        }
        let g = self.grid(c);
        self.run(Kernel::SumCols, 0, &[u32_len(r, "sum_cols")?, u32_len(c, "sum_cols")?, 0, 0], &[(1, x.buffer()), (2, out.buffer())], g)
    }

    fn sum_rows(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::f32("sum_rows", x)?;
        checks::vector_out("sum_rows", out, x.shape[0], DType::F32)?;
        let [r, c] = x.shape;
        let wg = self.pipelines.wg() as usize;
        if self.split_reductions && r.div_ceil(wg) < SPLIT_TARGET && c >= 2 * MIN_SLICE {
            // Few long rows: a workgroup per row and slice of it, then the slices added.
            let len = c.div_ceil(split_k(r, c));
            let slices = c.div_ceil(len);
            let params = [u32_len(r, "sum_rows")?, u32_len(c, "sum_rows")?, 0, len as u32];
            if slices == 1 {
                return self.run(Kernel::SumRowsPart, 0, &params, &[(1, x.buffer()), (2, out.buffer())], (r as u32, 1));
            }
            let part = self.alloc([slices, r], DType::F32, MemCategory::Activations)?;
            self.run(Kernel::SumRowsPart, 0, &params, &[(1, x.buffer()), (2, part.buffer())], (r as u32, slices as u32))?;
            return self.sum_slices(&part, out, false);
        }
        let g = self.grid(r);
        self.run(Kernel::SumRows, 0, &[u32_len(r, "sum_rows")?, u32_len(c, "sum_rows")?, 0, 0], &[(1, x.buffer()), (2, out.buffer())], g)
    }

    fn accumulate_sum(&mut self, x: &GpuTensor, acc: &mut GpuTensor, index: usize) -> Result<()> {
        checks::f32("accumulate_sum", x)?;
        checks::acc_index("accumulate_sum", acc, index, DType::F32)?;
        let [r, c] = x.shape;
        let n = u32_len(r * c, "accumulate_sum")? as usize;
        let parts = n.div_ceil(self.pipelines.wg() as usize).min(SPLIT_TARGET);
        if parts > 1 && self.split_reductions {
            // Longer than a workgroup: a workgroup per part, then the parts added in order.
            let len = n.div_ceil(parts);
            let parts = n.div_ceil(len);
            let part = self.alloc([1, parts], DType::F32, MemCategory::Activations)?;
            let p = [r as u32, c as u32, 0, len as u32];
            self.run(Kernel::AccumulatePart, 0, &p, &[(1, x.buffer()), (2, part.buffer())], (parts as u32, 1))?;
            let p = [parts as u32, 1, index as u32, 0];
            return self.run(Kernel::AccumulateFinish, 0, &p, &[(1, part.buffer()), (2, acc.buffer())], (1, 1));
        }
        let p = [r as u32, c as u32, index as u32, 0];
        self.run(Kernel::AccumulateSum, 0, &p, &[(1, x.buffer()), (2, acc.buffer())], (1, 1))
    }

    fn argmax_rows(&mut self, x: &GpuTensor, out: &mut GpuTensor) -> Result<()> {
        checks::f32("argmax_rows", x)?;
        checks::nonempty_rows("argmax_rows", x)?;
        checks::vector_out("argmax_rows", out, x.shape[0], DType::U32)?;
        let [r, c] = x.shape;
        let g = self.grid(r);
        self.run(
            Kernel::ArgmaxRows,
            0,
            &[u32_len(r, "argmax_rows")?, u32_len(c, "argmax_rows")?, 0, 0],
            &[(1, x.buffer()), (4, out.buffer())],
            g,
        )
    }

    fn count_correct(&mut self, logits: &GpuTensor, labels: &GpuTensor, acc: &mut GpuTensor, index: usize) -> Result<()> {
        checks::labels("count_correct", logits, labels)?;
        checks::acc_index("count_correct", acc, index, DType::U32)?;
        let [r, c] = logits.shape;
        let p = [u32_len(r, "count_correct")?, u32_len(c, "count_correct")?, index as u32, 0];
        let parts = r.div_ceil(self.pipelines.wg() as usize).min(SPLIT_TARGET);
        if parts > 1 && self.split_reductions {
            // A batch longer than a workgroup: a workgroup per part of the rows, then the
            // parts' counts added.
            let len = r.div_ceil(parts);
            let parts = r.div_ceil(len);
            let part = self.alloc([1, parts], DType::U32, MemCategory::Activations)?;
            let bindings = [(1, logits.buffer()), (3, labels.buffer()), (4, part.buffer())];
            self.run(Kernel::CountPart, 0, &[p[0], p[1], 0, len as u32], &bindings, (parts as u32, 1))?;
            let fin = [parts as u32, 1, index as u32, 0];
            return self.run(Kernel::CountFinish, 0, &fin, &[(3, part.buffer()), (4, acc.buffer())], (1, 1));
        }
        self.run(Kernel::CountCorrect, 0, &p, &[(1, logits.buffer()), (3, labels.buffer()), (4, acc.buffer())], (1, 1))
    }

    fn sgd_step(&mut self, p: &mut GpuTensor, g: &GpuTensor, v: &mut GpuTensor, hp: Sgd) -> Result<()> {
        checks::same_shape("sgd_step", p, g)?;
        checks::same_shape("sgd_step", p, v)?;
        checks::f32("sgd_step", p)?;
        let n = u32_len(p.numel(), "sgd_step")?;
        let params = [n, hp.lr.to_bits(), hp.momentum.to_bits(), hp.weight_decay.to_bits()];
        let grid = self.grid(n as usize);
        self.run(Kernel::Sgd, 0, &params, &[(1, p.buffer()), (2, g.buffer()), (3, v.buffer())], grid)
    }

    fn adamw_step(&mut self, p: &mut GpuTensor, g: &GpuTensor, m: &mut GpuTensor, v: &mut GpuTensor, hp: AdamW, step: u32) -> Result<()> {
        checks::same_shape("adamw_step", p, g)?;
        checks::same_shape("adamw_step", p, m)?;
        checks::same_shape("adamw_step", p, v)?;
        checks::f32("adamw_step", p)?;
        let n = u32_len(p.numel(), "adamw_step")?;
        let f = hp.factors(step);
        let params = [
            n,
            hp.lr.to_bits(),
            0f32.to_bits(),
            hp.weight_decay.to_bits(),
            hp.beta1.to_bits(),
            hp.beta2.to_bits(),
            hp.eps.to_bits(),
            f.decay.to_bits(),
            f.step_size.to_bits(),
            f.bias2_sqrt.to_bits(),
        ];
        let grid = self.grid(n as usize);
        self.run(Kernel::AdamW, 0, &params, &[(1, p.buffer()), (2, g.buffer()), (3, m.buffer()), (4, v.buffer())], grid)
    }

    fn optimizer_steps(&mut self, params: &mut [ParamRefs<'_, GpuTensor>], rule: OptStep) -> Result<()> {
        super::multi_optim::optimizer_steps(self, params, rule)
    }

    fn prepare_optimizer_steps(&mut self, params: usize, rule: OptStep) -> Result<()> {
        super::multi_optim::prepare_optimizer_steps(self, params, rule)
    }

    fn fill(&mut self, t: &mut GpuTensor, value: f32) -> Result<()> {
        let n = u32_len(t.numel(), "fill")?;
        match t.dtype {
            DType::F32 => self.elementwise(Kernel::Fill, n as usize, [n, 0, value.to_bits(), 0], &[(1, t.buffer())]),
            DType::U32 => self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, value as u32], &[(3, t.buffer())]),
            DType::F16 | DType::BF16 => {
                let bits = crate::tensor::float16::round_bits(t.dtype, value) as u32;
                let n = u32_len(t.words(), "fill")?;
                self.elementwise(Kernel::FillBits, n as usize, [n, 0, 0, bits | bits << 16], &[(3, t.buffer())])
            }
            DType::I8 | DType::I32 => checks::not_quant("fill", t),
        }
    }

    fn scale(&mut self, t: &mut GpuTensor, alpha: f32) -> Result<()> {
        checks::f32("scale", t)?;
        let n = u32_len(t.numel(), "scale")?;
        self.elementwise(Kernel::Scale, n as usize, [n, 0, alpha.to_bits(), 0], &[(1, t.buffer())])
    }

    fn add_to(&mut self, x: &GpuTensor, acc: &mut GpuTensor) -> Result<()> {
        checks::same_shape("add_to", x, acc)?;
        checks::f32("add_to", x)?;
        let n = u32_len(x.numel(), "add_to")?;
        self.elementwise(Kernel::AddTo, n as usize, [n, 0, 0, 0], &[(1, acc.buffer()), (2, x.buffer())])
    }

    fn copy(&mut self, src: &GpuTensor, dst: &mut GpuTensor) -> Result<()> {
        checks::same_shape("copy", src, dst)?;
        let n = u32_len(src.words(), "copy")?;
        self.elementwise(Kernel::Copy, n as usize, [n, 0, 0, 0], &[(3, dst.buffer()), (4, src.buffer())])
    }

    fn prepare(&mut self) -> Result<()> {
        // Matmul pipelines depend on the shapes (vec4 eligibility), so they compile on first use.
        for kernel in Kernel::SIMPLE {
            self.pipelines.get(&self.device, PipelineKey { kernel, dtype: DType::F32, variant: 0 })?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.rec.flush(&self.queue);
        self.check()
    }

    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.rec.counts.waits += 1;
        super::wait::wait(&self.device, "the submitted work")?;
        self.check()
    }
}
