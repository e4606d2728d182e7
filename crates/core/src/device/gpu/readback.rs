//! Reading a mappable buffer back to the host: map, wait, copy out, unmap; and reading many
//! tensors through one staging buffer.

use crate::error::{Error, Result};
use crate::tensor::{CoreOps, DType, HostData, TensorMeta};

pub fn map_and_read<T: bytemuck::Pod>(device: &wgpu::Device, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<T>> {
    let slice = buf.slice(..bytes);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    super::wait::wait(device, "a readback")?;
    match rx.recv_timeout(super::wait::limit()) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(Error::Gpu(format!("mapping a readback buffer failed: {e}"))),
        Err(_) => return Err(Error::DeviceLost("the readback never completed".into())),
    }
    let out = {
        let view = slice.get_mapped_range().map_err(|e| Error::Gpu(format!("reading a mapped buffer failed: {e:?}")))?;
        bytemuck::cast_slice::<u8, T>(&view).to_vec()
    };
    buf.unmap();
    Ok(out)
}

/// Where each tensor of a batched read lands in the one staging buffer: 256-byte aligned
/// offsets (a multiple of `wgpu::COPY_BUFFER_ALIGNMENT`), and the total size to map.
fn layout(bytes: impl Iterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut total = 0;
    let offsets = bytes
        .map(|b| {
            let at = total;
            total += b.div_ceil(256) * 256;
            at
        })
        .collect();
    (offsets, total)
}

impl super::GpuBackend {
    /// `Backend::read_many`: every tensor copied into one pooled staging buffer, one submit,
    /// one map, one wait — a log window's two or three small totals cost one round trip.
    pub(super) fn read_batched(&mut self, ts: &[&super::GpuTensor]) -> Result<Vec<HostData>> {
        for t in ts {
            crate::tensor::checks::not_quant("read_many", *t)?;
        }
        let (words, offsets) = self.read_words(ts)?;
        Ok(ts
            .iter()
            .zip(&offsets)
            .map(|(t, &at)| {
                let w = &words[(at / 4) as usize..][..t.words()];
                match t.dtype {
                    DType::U32 => HostData::U32(w.to_vec()),
                    DType::F32 => HostData::F32(bytemuck::cast_slice(w).to_vec()),
                    dt => HostData::F32(super::amp::unpack_words(dt, w, t.numel())),
                }
            })
            .collect())
    }

    /// The words of every tensor and where each starts (bytes): copied into one pooled staging
    /// buffer with the timestamps written so far behind them, then one submit, one map and one
    /// wait — the only wait of a log window.
    pub(super) fn read_words(&mut self, ts: &[&super::GpuTensor]) -> Result<(Vec<u32>, Vec<u64>)> {
        use crate::tensor::{MemCategory, memory_lock};
        let (offsets, data) = layout(ts.iter().map(|t| t.data_bytes()));
        if data == 0 {
            return Ok((Vec::new(), offsets));
        }
        let size = data + self.rec.timestamp_region();
        memory_lock(&self.shared.ledger).reserve(MemCategory::Staging, size)?;
        let pooled = self.shared.pool().take(size, super::STAGING);
        let staging = match pooled {
            Some(b) => b,
            None => self.create_buffer(size, super::STAGING, MemCategory::Staging).inspect_err(|_| {
                memory_lock(&self.shared.ledger).release(MemCategory::Staging, size);
            })?,
        };
        let enc = self.rec.encoder(&self.device);
        for (t, &at) in ts.iter().zip(&offsets) {
            if t.data_bytes() > 0 {
                enc.copy_buffer_to_buffer(t.buffer(), 0, &staging, at, t.data_bytes());
            }
        }
        let queries = self.rec.resolve_into(&self.device, &staging, data);
        let read = data + queries as u64 * 8;
        let out = self.flush().and_then(|_| {
            self.rec.counts.waits += 1;
            self.rec.counts.bytes_read_back += read;
            map_and_read::<u32>(&self.device, &staging, read)
        });
        memory_lock(&self.shared.ledger).release(MemCategory::Staging, size);
        self.shared.pool().put(staging);
        self.check()?;
        let mut words = out?;
        let ticks = words.split_off((data / 4) as usize);
        if self.rec.has_timestamps() {
            self.rec.absorb_ticks(&ticks);
        }
        Ok((words, offsets))
    }
}
