//! Attention of a prompt chunk on a CUDA GPU through our kernel (`kernels/prefill.cu`):
//! causal and grouped-query over the model's own KV buffers, one pass with an online softmax.
//! candle's ops build a `(queries × keys)` score matrix per KV head and an additive mask on the
//! host for it (100 MB at 2,048 tokens), which made long prompts slow.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use candle_core::{DType, Device, Result, Tensor};

use super::cuda_decode::{kernel, launch, ptr_of, stream_of};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/prefill.ptx"));
const MODULE: &str = "repohop_prefill";
/// Queries a block takes (`QB` in the kernel), four threads each.
const QUERIES: usize = 32;
const THREADS: u32 = 128;

pub(crate) struct PrefillAttention {
    stream: Arc<CudaStream>,
    func: CudaFunction,
    head_dim: usize,
}

impl PrefillAttention {
    /// The kernel for this head size (64 or 128, the Qwen models' sizes) on a GPU; `None`
    /// leaves prompt attention to candle's ops.
    pub(crate) fn new(device: &Device, head_dim: usize) -> Result<Option<Self>> {
        let name = match head_dim {
            64 => "attn_prefill_64",
            128 => "attn_prefill_128",
            _ => return Ok(None),
        };
        if !device.is_cuda() {
            return Ok(None);
        }
        Ok(Some(Self {
            stream: stream_of(device)?,
            func: kernel(device, MODULE, PTX, name)?,
            head_dim,
        }))
    }

    /// Attention of the `n` queries `q` (`(1, heads, n, head_dim)` f32, after rotary) at
    /// positions `pos..pos + n` over the keys and values at `0..pos + n` of the KV buffers
    /// (`(1, kv_heads, capacity, head_dim)` f32). Returns `(1, n, heads × head_dim)`.
    pub(crate) fn attend(
        &self,
        q: &Tensor,
        keys: &Tensor,
        values: &Tensor,
        pos: usize,
    ) -> Result<Tensor> {
        let (_, heads, n, hd) = q.dims4()?;
        let (_, kv_heads, capacity, khd) = keys.dims4()?;
        if hd != self.head_dim
            || khd != hd
            || values.dims() != keys.dims()
            || kv_heads == 0
            || !heads.is_multiple_of(kv_heads)
            || pos + n > capacity
            || [q.dtype(), keys.dtype(), values.dtype()] != [DType::F32; 3]
        {
            candle_core::bail!(
                "prefill attention: queries {:?} do not fit KV buffers {:?} at position {pos}",
                q.dims(),
                keys.dims()
            );
        }
        let q = q.contiguous()?;
        let out = Tensor::zeros((1, n, heads * hd), DType::F32, q.device())?;
        let s = &self.stream;
        let (qp, kp, vp, op) = (
            ptr_of(&q, s)?,
            ptr_of(keys, s)?,
            ptr_of(values, s)?,
            ptr_of(&out, s)?,
        );
        let ints = [n, pos, heads, kv_heads, capacity].map(|v| v as i32);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut b = s.launch_builder(&self.func);
        b.arg(&qp).arg(&kp).arg(&vp).arg(&op);
        for v in &ints {
            b.arg(v);
        }
        b.arg(&scale);
        launch(
            b,
            LaunchConfig {
                grid_dim: (n.div_ceil(QUERIES) as u32, heads as u32, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            },
        )?;
        Ok(out)
    }
}
