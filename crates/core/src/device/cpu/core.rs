//! The f32 ops and host transfers of the CPU backend (`CoreOps`).

use super::{CpuBackend, CpuTensor, Storage, ops, optim};
use crate::error::Result;
use crate::tensor::{AdamW, CoreOps, DType, HostData, MemCategory, Sgd, Shape, TensorMeta, checks};

impl CoreOps for CpuBackend {
    fn zeros(&mut self, shape: Shape, dtype: DType, cat: MemCategory) -> Result<CpuTensor> {
        self.alloc(shape, dtype, cat, || Storage::zeros(dtype, shape[0] * shape[1]))
    }

    fn upload_f32(&mut self, data: &[f32], shape: Shape, cat: MemCategory) -> Result<CpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.alloc(shape, DType::F32, cat, || Storage::F32(data.to_vec()))
    }

    fn upload_u32(&mut self, data: &[u32], shape: Shape, cat: MemCategory) -> Result<CpuTensor> {
        checks::data_len("upload", shape, data.len())?;
        self.alloc(shape, DType::U32, cat, || Storage::U32(data.to_vec()))
    }

    fn write_f32(&mut self, t: &mut CpuTensor, data: &[f32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        if let Storage::Bits16(bits, dt) = &mut t.data {
            // In place and on every thread: a fresh Vec per batch faulted its pages in again.
            super::amp::encode_par(*dt, data, bits);
            return Ok(());
        }
        checks::f32("write", t)?;
        ops::copy(t.f32_mut(), data);
        Ok(())
    }

    fn write_u32(&mut self, t: &mut CpuTensor, data: &[u32]) -> Result<()> {
        checks::data_len("write", t.shape, data.len())?;
        checks::dtype("write", t, DType::U32)?;
        t.u32_mut().copy_from_slice(data);
        Ok(())
    }

    fn read_f32(&mut self, t: &CpuTensor) -> Result<Vec<f32>> {
        if let Storage::Bits16(bits, dt) = &t.data {
            return Ok(crate::tensor::float16::decode(*dt, bits));
        }
        checks::f32("read", t)?;
        Ok(t.f32().to_vec())
    }

    fn read_u32(&mut self, t: &CpuTensor) -> Result<Vec<u32>> {
        checks::dtype("read", t, DType::U32)?;
        Ok(t.u32().to_vec())
    }

    fn read_many(&mut self, ts: &[&CpuTensor]) -> Result<Vec<HostData>> {
        for t in ts {
            checks::not_quant("read_many", *t)?;
        }
        ts.iter()
            .map(|t| if t.dtype() == DType::U32 { self.read_u32(t).map(HostData::U32) } else { self.read_f32(t).map(HostData::F32) })
            .collect()
    }

    fn read_f32_into(&mut self, ts: &[&CpuTensor], out: &mut Vec<f32>) -> Result<()> {
        for t in ts {
            match &t.data {
                Storage::Bits16(bits, dt) => out.extend(crate::tensor::float16::decode(*dt, bits)),
                _ => {
                    checks::f32("read", *t)?;
                    out.extend_from_slice(t.f32());
                }
            }
        }
        Ok(())
    }

    fn host_f32_mut<'t>(&mut self, t: &'t mut CpuTensor) -> Option<&'t mut [f32]> {
        match &mut t.data {
            Storage::F32(v) => Some(v),
            _ => None,
        }
    }

    fn matmul(&mut self, a: &CpuTensor, b: &CpuTensor, c: &mut CpuTensor, ta: bool, tb: bool, acc: bool) -> Result<()> {
        let (m, n, k) = checks::matmul(a, b, c, ta, tb)?;
        ops::gemm(a.f32(), b.f32(), c.f32_mut(), m, n, k, ta, tb, acc, self.threads);
        Ok(())
    }

    fn bias_add(&mut self, y: &mut CpuTensor, bias: &CpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let cols = y.shape[1];
        ops::bias_add(y.f32_mut(), bias.f32(), cols, false);
        Ok(())
    }

    fn bias_relu(&mut self, y: &mut CpuTensor, bias: &CpuTensor) -> Result<()> {
        checks::bias(y, bias)?;
        let cols = y.shape[1];
        ops::bias_add(y.f32_mut(), bias.f32(), cols, true);
        Ok(())
    }

    fn relu(&mut self, x: &mut CpuTensor) -> Result<()> {
        checks::f32("relu", x)?;
        ops::map_inplace(x.f32_mut(), |v| v.max(0.0));
        Ok(())
    }

    fn relu_backward(&mut self, grad: &mut CpuTensor, act: &CpuTensor) -> Result<()> {
        checks::same_shape("relu_backward", grad, act)?;
        checks::f32("relu_backward", grad)?;
        ops::zip_inplace(grad.f32_mut(), act.f32(), |g, a| if a > 0.0 { g } else { 0.0 });
        Ok(())
    }

    fn softmax_xent(
        &mut self,
        logits: &CpuTensor,
        labels: &CpuTensor,
        loss_rows: &mut CpuTensor,
        grad: Option<&mut CpuTensor>,
        grad_scale: f32,
    ) -> Result<()> {
        checks::labels("softmax_xent", logits, labels)?;
        let [rows, cols] = logits.shape;
        checks::vector_out("softmax_xent", loss_rows, rows, DType::F32)?;
        let grad = match grad {
            Some(g) => {
                checks::same_shape("softmax_xent", g, logits)?;
                Some(g.f32_mut())
            }
            None => None,
        };
        ops::softmax_xent(logits.f32(), labels.u32(), loss_rows.f32_mut(), grad, cols, grad_scale);
        Ok(())
    }

    fn sum_cols(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::vector_out("sum_cols", out, x.shape[1], DType::F32)?;
        if let Storage::Bits16(bits, dt) = &x.data {
            ops::sum_cols_16(*dt, bits, out.f32_mut(), x.shape[1]);
            return Ok(());
        }
        checks::f32("sum_cols", x)?;
        ops::sum_cols(x.f32(), out.f32_mut(), x.shape[1]);
        Ok(())
    }

    fn sum_rows(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::f32("sum_rows", x)?;
        checks::vector_out("sum_rows", out, x.shape[0], DType::F32)?;
        ops::sum_rows(x.f32(), out.f32_mut(), x.shape[1]);
        Ok(())
    }

    fn accumulate_sum(&mut self, x: &CpuTensor, acc: &mut CpuTensor, index: usize) -> Result<()> {
        checks::f32("accumulate_sum", x)?;
        checks::acc_index("accumulate_sum", acc, index, DType::F32)?;
        acc.f32_mut()[index] += ops::sum(x.f32());
        Ok(())
    }

    fn argmax_rows(&mut self, x: &CpuTensor, out: &mut CpuTensor) -> Result<()> {
        checks::f32("argmax_rows", x)?;
        checks::nonempty_rows("argmax_rows", x)?;
        checks::vector_out("argmax_rows", out, x.shape[0], DType::U32)?;
        let cols = x.shape[1];
        for (o, row) in out.u32_mut().iter_mut().zip(x.f32().chunks_exact(cols)) {
            *o = ops::argmax(row) as u32;
        }
        Ok(())
    }

    fn count_correct(&mut self, logits: &CpuTensor, labels: &CpuTensor, acc: &mut CpuTensor, index: usize) -> Result<()> {
        checks::labels("count_correct", logits, labels)?;
        checks::acc_index("count_correct", acc, index, DType::U32)?;
        let cols = logits.shape[1];
        let hits = logits.f32().chunks_exact(cols).zip(labels.u32()).filter(|(row, l)| ops::argmax(row) as u32 == **l).count();
        acc.u32_mut()[index] += hits as u32;
        Ok(())
    }

    fn sgd_step(&mut self, p: &mut CpuTensor, g: &CpuTensor, v: &mut CpuTensor, hp: Sgd) -> Result<()> {
        checks::same_shape("sgd_step", p, g)?;
        checks::same_shape("sgd_step", p, v)?;
        checks::f32("sgd_step", p)?;
        optim::sgd(p.f32_mut(), g.f32(), v.f32_mut(), hp);
        Ok(())
    }

    fn adamw_step(&mut self, p: &mut CpuTensor, g: &CpuTensor, m: &mut CpuTensor, v: &mut CpuTensor, hp: AdamW, step: u32) -> Result<()> {
        checks::same_shape("adamw_step", p, g)?;
        checks::same_shape("adamw_step", p, m)?;
        checks::same_shape("adamw_step", p, v)?;
        checks::f32("adamw_step", p)?;
        optim::adamw(p.f32_mut(), g.f32(), m.f32_mut(), v.f32_mut(), hp, step);
        Ok(())
    }

    fn fill(&mut self, t: &mut CpuTensor, value: f32) -> Result<()> {
        checks::not_quant("fill", t)?;
        match &mut t.data {
            Storage::F32(v) => v.fill(value),
            Storage::U32(v) => v.fill(value as u32),
            Storage::Bits16(v, dt) => v.fill(crate::tensor::float16::round_bits(*dt, value)),
            Storage::I8(_) | Storage::I32(_) => {
                return Err(crate::error::Error::Internal("checks::not_quant let an int8 fill through".into()));
            }
        }
        Ok(())
    }

    fn scale(&mut self, t: &mut CpuTensor, alpha: f32) -> Result<()> {
        checks::f32("scale", t)?;
        ops::map_inplace(t.f32_mut(), |v| v * alpha);
        Ok(())
    }

    fn add_to(&mut self, x: &CpuTensor, acc: &mut CpuTensor) -> Result<()> {
        checks::same_shape("add_to", x, acc)?;
        checks::f32("add_to", x)?;
        ops::zip_inplace(acc.f32_mut(), x.f32(), |a, b| a + b);
        Ok(())
    }

    fn copy(&mut self, src: &CpuTensor, dst: &mut CpuTensor) -> Result<()> {
        checks::same_shape("copy", src, dst)?;
        match (&src.data, &mut dst.data) {
            (Storage::F32(s), Storage::F32(d)) => d.copy_from_slice(s),
            (Storage::U32(s), Storage::U32(d)) => d.copy_from_slice(s),
            (Storage::Bits16(s, _), Storage::Bits16(d, _)) => d.copy_from_slice(s),
            (Storage::I8(s), Storage::I8(_)) => match dst.i8_mut() {
                Some(d) => d.copy_from_slice(s),
                None => return Err(crate::error::Error::Internal("an i8 tensor without i8 storage".into())),
            },
            (Storage::I32(s), Storage::I32(d)) => d.copy_from_slice(s),
            _ => return Err(crate::error::Error::Internal("copy between dtypes that checks::same_shape accepted".into())),
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
}
