//! Reading a mappable buffer back to the host: map, wait, copy out, unmap.


use crate::error::{Error, Result};

pub fn map_and_read<T: bytemuck::Pod>(device: &wgpu::Device, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<T>> {
    let slice = buf.slice(..bytes);
    let (tx, rx) = std::sync::mpsc::channel();
    slice.map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    device.poll(wgpu::PollType::wait_indefinitely()).map_err(super::recorder::poll_error)?;
    match rx.recv() {
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
