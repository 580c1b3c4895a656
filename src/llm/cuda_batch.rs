//! Attention for one decode step of several sequences on a CUDA GPU (`kernels/batch.cu`), each
//! sequence over its own KV buffers: the step's keys and values appended, then each
//! sequence's queries against its keys, two launches a layer for the whole batch. The weights
//! are read once per step for every sequence by candle's several-row products.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use candle_core::{DType, Device, Result, Tensor};

use super::cuda_decode::{kernel, launch, ptr_of, stream_of};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/batch.ptx"));
const MODULE: &str = "repohop_batch";
/// Threads of an attention block: four warps (`WARPS` in the kernel).
const THREADS: u32 = 128;

pub(crate) struct BatchAttention {
    stream: Arc<CudaStream>,
    append: CudaFunction,
    attend: CudaFunction,
    /// This step's KV addresses, `[layer][sequence][key, value]`.
    table: CudaSlice<u64>,
    /// This step's positions, then capacities, one per sequence.
    meta: CudaSlice<i32>,
    sequences: usize,
    layers: usize,
}

impl BatchAttention {
    /// The kernels on a GPU for head sizes they take (a multiple of 32, at most 256).
    pub(crate) fn new(device: &Device, head_dim: usize) -> Result<Option<Self>> {
        if !device.is_cuda() || !head_dim.is_multiple_of(32) || head_dim > 256 {
            return Ok(None);
        }
        let load = |name: &str| kernel(device, MODULE, PTX, name);
        let stream = stream_of(device)?;
        let w = candle_core::Error::wrap;
        Ok(Some(Self {
            append: load("kv_append_batch")?,
            attend: load("attn_batch")?,
            table: stream.alloc_zeros::<u64>(1).map_err(w)?,
            meta: stream.alloc_zeros::<i32>(1).map_err(w)?,
            stream,
            sequences: 0,
            layers: 0,
        }))
    }

    /// Sets the step's sequences: `kv[layer][s]` the key and value buffers of sequence `s`,
    /// `pos[s]` its position, `cap[s]` its buffers' capacity (above `pos[s]`). One copy to the
    /// GPU per step.
    pub(crate) fn prepare(
        &mut self,
        kv: &[Vec<(u64, u64)>],
        pos: &[usize],
        cap: &[usize],
    ) -> Result<()> {
        let n = pos.len();
        if n == 0 || cap.len() != n || pos.iter().zip(cap).any(|(p, c)| p >= c) {
            candle_core::bail!("batch step: positions {pos:?} do not fit capacities {cap:?}");
        }
        if kv.iter().any(|l| l.len() != n) {
            candle_core::bail!("batch step: a layer lacks some sequence's KV buffers");
        }
        let table: Vec<u64> = kv.iter().flatten().flat_map(|&(k, v)| [k, v]).collect();
        let meta: Vec<i32> = pos.iter().chain(cap).map(|&v| v as i32).collect();
        let w = candle_core::Error::wrap;
        self.table = self.stream.clone_htod(&table).map_err(w)?;
        self.meta = self.stream.clone_htod(&meta).map_err(w)?;
        self.sequences = n;
        self.layers = kv.len();
        Ok(())
    }

    /// Layer `layer` of the prepared step: appends `k`, `v` (`(1, kv_heads, n, head_dim)`)
    /// to each sequence's buffers and returns the attention of `q` (`(1, heads, n,
    /// head_dim)`, after rotary) as `(1, n, heads × head_dim)`.
    pub(crate) fn attend(
        &self,
        layer: usize,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
    ) -> Result<Tensor> {
        let (_, heads, n, hd) = q.dims4()?;
        let (_, kv_heads, kn, khd) = k.dims4()?;
        if n != self.sequences
            || layer >= self.layers
            || kn != n
            || khd != hd
            || v.dims() != k.dims()
            || kv_heads == 0
            || !heads.is_multiple_of(kv_heads)
            || [q.dtype(), k.dtype(), v.dtype()] != [DType::F32; 3]
        {
            candle_core::bail!(
                "batch attention: queries {:?}, keys {:?} for {} sequences",
                q.dims(),
                k.dims(),
                self.sequences
            );
        }
        let s = &self.stream;
        let (q, k, v) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
        let out = Tensor::zeros((1, n, heads * hd), DType::F32, q.device())?;
        let (qp, kp, vp, op) = (
            ptr_of(&q, s)?,
            ptr_of(&k, s)?,
            ptr_of(&v, s)?,
            ptr_of(&out, s)?,
        );
        let table = self.table.device_ptr(s).0 + (layer * n * 2 * 8) as u64;
        let pos = self.meta.device_ptr(s).0;
        let cap = pos + (n * 4) as u64;
        let (ni, heads_i, kvh_i, hd_i) = (n as i32, heads as i32, kv_heads as i32, hd as i32);
        let mut b = s.launch_builder(&self.append);
        b.arg(&kp)
            .arg(&vp)
            .arg(&table)
            .arg(&pos)
            .arg(&cap)
            .arg(&ni)
            .arg(&kvh_i)
            .arg(&hd_i);
        launch(b, config((n, kv_heads), hd as u32))?;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut b = s.launch_builder(&self.attend);
        b.arg(&qp)
            .arg(&table)
            .arg(&pos)
            .arg(&cap)
            .arg(&op)
            .arg(&ni)
            .arg(&heads_i)
            .arg(&kvh_i)
            .arg(&hd_i)
            .arg(&scale);
        launch(b, config((n, heads), THREADS))?;
        Ok(out)
    }
}

fn config((x, y): (usize, usize), threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (x as u32, y as u32, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}
