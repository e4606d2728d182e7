//! GPU buffers: a pool that reuses freed buffers of the same size (a training loop allocates
//! the same shapes every step), and `GpuTensor`, which returns its buffer to the pool and its
//! bytes to the ledger when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::tensor::{DType, Ledger, MemCategory, Shape, TensorMeta, memory_lock};

/// Freed buffers kept for reuse beyond this are destroyed instead.
const MAX_POOLED_BYTES: u64 = 1 << 30;

#[derive(Default)]
pub struct BufferPool {
    free: HashMap<(u64, u32), Vec<wgpu::Buffer>>,
    free_bytes: u64,
}

impl BufferPool {
    /// A free buffer of this size and usage: the oldest one (the lowest id), so a training
    /// step gets the same buffers every step whatever else was freed meanwhile (a validation
    /// pass), and the bind groups made for them are reused.
    pub fn take(&mut self, size: u64, usage: wgpu::BufferUsages) -> Option<wgpu::Buffer> {
        let list = self.free.get_mut(&(size, usage.bits()))?;
        let oldest = list.iter().enumerate().min_by(|a, b| a.1.cmp(b.1)).map(|(i, _)| i)?;
        let buf = list.swap_remove(oldest);
        self.free_bytes -= size;
        Some(buf)
    }

    pub fn put(&mut self, buf: wgpu::Buffer) {
        let size = buf.size();
        if self.free_bytes + size > MAX_POOLED_BYTES {
            buf.destroy();
            return;
        }
        self.free_bytes += size;
        self.free.entry((size, buf.usage().bits())).or_default().push(buf);
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }
}

/// State shared by the backend and every tensor it created.
#[derive(Default)]
pub struct Shared {
    pub pool: Mutex<BufferPool>,
    pub ledger: Arc<Mutex<Ledger>>,
}

impl Shared {
    pub fn pool(&self) -> std::sync::MutexGuard<'_, BufferPool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Bytes a buffer for `numel` elements occupies: a multiple of 256 (alignment of copies and
/// bindings on every backend), never zero.
pub fn buffer_size(numel: usize, dtype: DType) -> u64 {
    let bytes = (numel * dtype.size_bytes()).max(4) as u64;
    bytes.div_ceil(256) * 256
}

pub struct GpuTensor {
    pub(crate) buf: Option<wgpu::Buffer>,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) cat: MemCategory,
    pub(crate) shared: Arc<Shared>,
}

impl GpuTensor {
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        self.buf.as_ref().expect("a live tensor always holds its buffer")
    }

    /// Bytes of data, in whole 32-bit words (16-bit types are packed two per word, i8 four).
    pub(crate) fn data_bytes(&self) -> u64 {
        self.words() as u64 * 4
    }

    /// 32-bit words the data occupies.
    pub(crate) fn words(&self) -> usize {
        self.numel().div_ceil(self.dtype.per_word())
    }
}

impl TensorMeta for GpuTensor {
    fn shape(&self) -> Shape {
        self.shape
    }
    fn dtype(&self) -> DType {
        self.dtype
    }
}

impl std::fmt::Debug for GpuTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuTensor({:?}, {}, {})", self.shape, self.dtype.name(), self.cat.name())
    }
}

impl Drop for GpuTensor {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            memory_lock(&self.shared.ledger).release(self.cat, buf.size());
            self.shared.pool().put(buf);
        }
    }
}
