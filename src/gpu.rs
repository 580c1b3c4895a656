//! Opening a CUDA GPU for candle, shared by the LLM runtime and the embedders.

use candle_core::Device;

/// CUDA GPU `ordinal`, without cudarc's per-buffer event tracking: with it, every buffer gets
/// two CUDA events and every kernel argument records one, which only serves to order work
/// across several streams, while candle issues all of a device's work to one stream. In a
/// decode step of many sequences (~700 candle ops) that bookkeeping was most of the host's
/// time.
pub fn open_cuda(ordinal: usize) -> candle_core::Result<Device> {
    let device = Device::new_cuda(ordinal)?;
    #[cfg(feature = "cuda")]
    // SAFETY: candle runs all work of this device on its one stream, and cudarc waits on the
    // events only in multi-stream mode, so no ordering is lost; buffers made before this
    // call (none) would keep theirs.
    unsafe {
        device.as_cuda_device()?.disable_event_tracking()
    };
    Ok(device)
}
