//! One decode step on a CUDA GPU through our kernels (`kernels/decode.cu`), instead of
//! candle's generic ops: the mat-vecs read the GGUF's Q4_K / Q6_K blocks in place, nothing is
//! allocated per token, and the whole step (~13 launches a layer) is captured once as a CUDA
//! graph and replayed; only the token and the position travel to the GPU per step. Prefill
//! and every other device path stay on candle; both write the same KV buffers.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{
    sys, CudaFunction, CudaGraph, CudaSlice, CudaStream, DevicePtr, LaunchArgs, LaunchConfig,
    PushKernelArg,
};
use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Result, Storage, Tensor};

use super::linear::Weight;
use super::qwen::Layer;

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/decode.ptx"));
const MODULE: &str = "repohop_decode";
/// Threads of a mat-vec block: a warp per row (`MV_ROWS` in the kernel).
const MV_ROWS: u32 = 4;
/// Rows from which a mat-vec takes four rows a warp (`matvec_*_r4`): 16 rows a block, still
/// two blocks for each of an H100/H200's 132 multiprocessors.
const WIDE_ROWS: usize = 4224;
/// Warps of an attention split block (`ATT_WARPS`).
const ATT_THREADS: u32 = 128;

#[derive(Clone, Copy)]
enum Quant {
    Q4K,
    Q6K,
}

/// A `(n, k)` quantized matrix on the GPU.
#[derive(Clone, Copy)]
struct Mat {
    ptr: u64,
    quant: Quant,
    n: usize,
    k: usize,
}

impl Mat {
    fn of(w: &Weight) -> Option<Mat> {
        let Weight::Candle(QMatMul::QTensor(t)) = w else {
            return None;
        };
        Mat::of_qtensor(t)
    }

    fn of_qtensor(t: &QTensor) -> Option<Mat> {
        let quant = match t.dtype() {
            GgmlDType::Q4K => Quant::Q4K,
            GgmlDType::Q6K => Quant::Q6K,
            _ => return None,
        };
        let (n, k) = t.shape().dims2().ok()?;
        if k % 256 != 0 {
            return None;
        }
        let ptr = t.device_ptr().ok()? as u64;
        Some(Mat { ptr, quant, n, k })
    }
}

/// A layer's addresses: matrices, and f32 vectors (0 where a model has none).
struct LayerPtrs {
    attn_norm: u64,
    q: Mat,
    k: Mat,
    v: Mat,
    o: Mat,
    q_bias: u64,
    k_bias: u64,
    v_bias: u64,
    q_norm: u64,
    k_norm: u64,
    ffn_norm: u64,
    gate: Mat,
    up: Mat,
    down: Mat,
}

/// The model's shape as the kernels need it.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub ffn: usize,
    pub vocab: usize,
    pub eps: f32,
}

struct Funcs {
    q4k: CudaFunction,
    q6k: CudaFunction,
    q4k_r4: CudaFunction,
    q6k_r4: CudaFunction,
    embed: CudaFunction,
    rms: CudaFunction,
    rope: CudaFunction,
    head_norm: CudaFunction,
    attn: CudaFunction,
    merge: CudaFunction,
    silu: CudaFunction,
}

/// Scratch for one step, allocated once.
struct Scratch {
    x: CudaSlice<f32>,
    xn: CudaSlice<f32>,
    q: CudaSlice<f32>,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
    att: CudaSlice<f32>,
    g: CudaSlice<f32>,
    u: CudaSlice<f32>,
    h: CudaSlice<f32>,
    /// Token and position of the step.
    params: CudaSlice<i32>,
    inv_freq: CudaSlice<f32>,
    /// Attention splits' partial results, sized for the largest capacity seen.
    part: CudaSlice<f32>,
    part_splits: usize,
}

#[derive(Clone, Copy)]
struct Addresses {
    x: u64,
    xn: u64,
    q: u64,
    k: u64,
    v: u64,
    att: u64,
    g: u64,
    u: u64,
    h: u64,
    params: u64,
    inv: u64,
    part: u64,
    logits: u64,
}

/// A captured step, valid for the KV buffers it was captured with.
struct Captured {
    kv: Vec<(u64, u64)>,
    capacity: usize,
    graph: CudaGraph,
}

// SAFETY: a graph is used only by `CudaDecoder::step`, which takes `&mut self`: never from
// two threads at once, which is all CUDA asks of graph objects (the engine that owns the
// model is moved between threads and shared behind a lock).
unsafe impl Send for Captured {}
// SAFETY: as for `Send`: no `&self` method touches the graph.
unsafe impl Sync for Captured {}

pub(crate) struct CudaDecoder {
    stream: Arc<CudaStream>,
    funcs: Funcs,
    shape: Shape,
    layers: Vec<LayerPtrs>,
    embed: u64,
    embed_f16: bool,
    norm: u64,
    lm_head: Mat,
    scratch: Scratch,
    /// The step's logits `(1, vocab)`; each step returns a copy.
    logits: Tensor,
    graph: Option<Captured>,
    /// Replay a captured graph (else launch the kernels one by one).
    pub use_graph: bool,
}

pub(super) fn stream_of(device: &Device) -> Result<Arc<CudaStream>> {
    Ok(device.as_cuda_device()?.cuda_stream())
}

/// The device address of a contiguous f32 or f16 CUDA tensor's first element.
pub(super) fn ptr_of(t: &Tensor, stream: &CudaStream) -> Result<u64> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cuda(s) = &*storage else {
        candle_core::bail!("tensor is not on a CUDA device")
    };
    let Some((start, _)) = layout.contiguous_offsets() else {
        candle_core::bail!("tensor is not contiguous")
    };
    let (base, size) = match t.dtype() {
        DType::F32 => (s.as_cuda_slice::<f32>()?.device_ptr(stream).0, 4),
        DType::F16 => (s.as_cuda_slice::<half::f16>()?.device_ptr(stream).0, 2),
        d => candle_core::bail!("no kernel reads {d:?} tensors"),
    };
    Ok(base + (start * size) as u64)
}

fn opt_ptr(t: Option<&Tensor>, stream: &CudaStream) -> Result<u64> {
    t.map(|t| ptr_of(t, stream))
        .transpose()
        .map(|p| p.unwrap_or(0))
}

/// The kernel `name` of our PTX module `module` (`ptx`), loaded once per device.
pub(super) fn kernel(device: &Device, module: &str, ptx: &str, name: &str) -> Result<CudaFunction> {
    Ok(device
        .as_cuda_device()?
        .get_or_load_custom_func(name, module, ptx)?
        .into_cuda_function())
}

/// Launches a kernel whose arguments `b` holds.
pub(super) fn launch(mut b: LaunchArgs, config: LaunchConfig) -> Result<()> {
    // SAFETY: every launch passes the kernel's parameters in its declared order and types
    // (device addresses as u64, i32 and f32 scalars); the addresses are of buffers the model
    // or the decoder own, alive until the stream has run the kernel, and sized for the
    // model's shape, which `CudaDecoder::new` checked the kernels take.
    unsafe { b.launch(config) }
        .map(|_| ())
        .map_err(candle_core::Error::wrap)
}

fn cfg(grid: (u32, u32), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid.0, grid.1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

impl CudaDecoder {
    /// A decoder over the model's weights when every matrix is Q4_K or Q6_K with rows of a
    /// multiple of 256 and the heads fit the kernels; `None` sends decode to candle's ops.
    pub(crate) fn new(
        device: &Device,
        shape: Shape,
        rope_theta: f64,
        embed: &Tensor,
        layers: &[Layer],
        norm: &Tensor,
        lm_head: &Weight,
    ) -> Result<Option<Self>> {
        let hd = shape.head_dim;
        if !device.is_cuda()
            || !hd.is_multiple_of(32)
            || hd > 256
            || shape.kv_heads == 0
            || !shape.heads.is_multiple_of(shape.kv_heads)
            || !matches!(embed.dtype(), DType::F16 | DType::F32)
        {
            return Ok(None);
        }
        let stream = stream_of(device)?;
        let mut ptrs = Vec::with_capacity(layers.len());
        for l in layers {
            let mats = [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].map(Mat::of);
            let [Some(q), Some(k), Some(v), Some(o), Some(gate), Some(up), Some(down)] = mats
            else {
                return Ok(None);
            };
            ptrs.push(LayerPtrs {
                attn_norm: ptr_of(&l.attn_norm, &stream)?,
                q,
                k,
                v,
                o,
                q_bias: opt_ptr(l.q_bias.as_ref(), &stream)?,
                k_bias: opt_ptr(l.k_bias.as_ref(), &stream)?,
                v_bias: opt_ptr(l.v_bias.as_ref(), &stream)?,
                q_norm: opt_ptr(l.q_norm.as_ref(), &stream)?,
                k_norm: opt_ptr(l.k_norm.as_ref(), &stream)?,
                ffn_norm: ptr_of(&l.ffn_norm, &stream)?,
                gate,
                up,
                down,
            });
        }
        let Some(lm_head) = Mat::of(lm_head) else {
            return Ok(None);
        };
        let load = |name: &str| kernel(device, MODULE, PTX, name);
        let funcs = Funcs {
            q4k: load("matvec_q4k")?,
            q6k: load("matvec_q6k")?,
            q4k_r4: load("matvec_q4k_r4")?,
            q6k_r4: load("matvec_q6k_r4")?,
            embed: load("embed_row")?,
            rms: load("rms_norm")?,
            rope: load("rope_append")?,
            head_norm: load("head_norm")?,
            attn: load("attn_split")?,
            merge: load("attn_merge")?,
            silu: load("silu_mul")?,
        };
        // The rotary frequencies exactly as the host tables compute them.
        let inv: Vec<f32> = (0..hd / 2)
            .map(|i| 1.0 / rope_theta.powf(2.0 * i as f64 / hd as f64) as f32)
            .collect();
        let zeros = |n: usize| -> Result<CudaSlice<f32>> {
            stream
                .alloc_zeros::<f32>(n.max(1))
                .map_err(candle_core::Error::wrap)
        };
        let scratch = Scratch {
            x: zeros(shape.hidden)?,
            xn: zeros(shape.hidden)?,
            q: zeros(shape.heads * hd)?,
            k: zeros(shape.kv_heads * hd)?,
            v: zeros(shape.kv_heads * hd)?,
            att: zeros(shape.heads * hd)?,
            g: zeros(shape.ffn)?,
            u: zeros(shape.ffn)?,
            h: zeros(shape.ffn)?,
            params: stream
                .alloc_zeros::<i32>(2)
                .map_err(candle_core::Error::wrap)?,
            inv_freq: stream.clone_htod(&inv).map_err(candle_core::Error::wrap)?,
            part: zeros(1)?,
            part_splits: 0,
        };
        Ok(Some(CudaDecoder {
            embed: ptr_of(embed, &stream)?,
            embed_f16: embed.dtype() == DType::F16,
            norm: ptr_of(norm, &stream)?,
            logits: Tensor::zeros((1, shape.vocab), DType::F32, device)?,
            stream,
            funcs,
            shape,
            layers: ptrs,
            lm_head,
            scratch,
            graph: None,
            use_graph: true,
        }))
    }

    /// Runs `token` at `pos`, whose keys and values go to `kv[layer]` (`(k, v)` buffers of
    /// `(kv_heads, capacity, head_dim)` f32, capacity > `pos`). Returns logits `(1, vocab)`.
    pub(crate) fn step(
        &mut self,
        token: u32,
        pos: usize,
        kv: &[(u64, u64)],
        capacity: usize,
    ) -> Result<Tensor> {
        if kv.len() != self.layers.len() || pos >= capacity {
            candle_core::bail!("decode step: KV buffers do not fit the model");
        }
        if token as usize >= self.shape.vocab {
            candle_core::bail!("token {token} is outside the vocabulary");
        }
        let w = |e| candle_core::Error::wrap(e);
        let splits = attn_splits(capacity);
        if splits > self.scratch.part_splits {
            let n = self.shape.heads * splits * (self.shape.head_dim + 2);
            self.scratch.part = self.stream.alloc_zeros::<f32>(n).map_err(w)?;
            self.scratch.part_splits = splits;
            self.graph = None;
        }
        self.stream
            .memcpy_htod(&[token as i32, pos as i32], &mut self.scratch.params)
            .map_err(w)?;
        let addresses = self.addresses()?;
        if !self.use_graph {
            self.launch_all(&addresses, kv, capacity)?;
        } else {
            let fresh = match &self.graph {
                Some(c) => c.capacity != capacity || c.kv != kv,
                None => true,
            };
            if fresh {
                self.graph = None;
                self.stream
                    .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
                    .map_err(w)?;
                let launched = self.launch_all(&addresses, kv, capacity);
                let graph = self
                    .stream
                    .end_capture(sys::CUgraphInstantiate_flags(0))
                    .map_err(w)?;
                launched?;
                let Some(graph) = graph else {
                    candle_core::bail!("CUDA graph capture gave no graph");
                };
                self.graph = Some(Captured {
                    kv: kv.to_vec(),
                    capacity,
                    graph,
                });
            }
            if let Some(c) = &self.graph {
                c.graph.launch().map_err(w)?;
            }
        }
        self.logits.copy()
    }

    /// The scratch buffers' device addresses, read once outside any capture (reading them
    /// may record events on the stream).
    fn addresses(&self) -> Result<Addresses> {
        let s = &self.scratch;
        let p = |x: &CudaSlice<f32>| x.device_ptr(&self.stream).0;
        Ok(Addresses {
            x: p(&s.x),
            xn: p(&s.xn),
            q: p(&s.q),
            k: p(&s.k),
            v: p(&s.v),
            att: p(&s.att),
            g: p(&s.g),
            u: p(&s.u),
            h: p(&s.h),
            params: s.params.device_ptr(&self.stream).0,
            inv: p(&s.inv_freq),
            part: p(&s.part),
            logits: ptr_of(&self.logits, &self.stream)?,
        })
    }

    /// Every kernel of one step, in order, on the stream: launches of plain addresses only.
    fn launch_all(&self, a: &Addresses, kv: &[(u64, u64)], capacity: usize) -> Result<()> {
        let sh = self.shape;
        let Addresses {
            x,
            xn,
            q,
            k,
            v,
            att,
            g,
            u,
            h,
            params,
            inv,
            part,
            logits,
        } = *a;
        let (hidden, ffn) = (sh.hidden as i32, sh.ffn as i32);
        let hd = sh.head_dim;
        let (heads, kvh) = (sh.heads as i32, sh.kv_heads as i32);
        let cap = capacity as i32;

        let f16 = i32::from(self.embed_f16);
        let mut b = self.stream.launch_builder(&self.funcs.embed);
        b.arg(&self.embed)
            .arg(&f16)
            .arg(&params)
            .arg(&x)
            .arg(&hidden);
        launch(b, cfg((sh.hidden.div_ceil(256) as u32, 1), 256))?;

        let splits = attn_splits(capacity);
        let chunk = capacity.div_ceil(splits) as i32;
        let scale = 1.0 / (hd as f32).sqrt();
        for (l, &(kc, vc)) in self.layers.iter().zip(kv) {
            self.rms_norm(x, l.attn_norm, xn, sh.hidden)?;
            self.matvec(l.q, xn, l.q_bias, q, false)?;
            self.matvec(l.k, xn, l.k_bias, k, false)?;
            self.matvec(l.v, xn, l.v_bias, v, false)?;
            let hd_i = hd as i32;
            if l.q_norm != 0 && l.k_norm != 0 {
                let mut b = self.stream.launch_builder(&self.funcs.head_norm);
                b.arg(&q)
                    .arg(&k)
                    .arg(&l.q_norm)
                    .arg(&l.k_norm)
                    .arg(&heads)
                    .arg(&hd_i)
                    .arg(&sh.eps);
                launch(b, cfg(((sh.heads + sh.kv_heads) as u32, 1), hd as u32))?;
            }
            let mut b = self.stream.launch_builder(&self.funcs.rope);
            b.arg(&q)
                .arg(&k)
                .arg(&v)
                .arg(&kc)
                .arg(&vc)
                .arg(&inv)
                .arg(&params)
                .arg(&heads)
                .arg(&kvh)
                .arg(&hd_i)
                .arg(&cap);
            launch(
                b,
                cfg(((sh.heads + sh.kv_heads) as u32, 1), (hd / 2) as u32),
            )?;
            let mut b = self.stream.launch_builder(&self.funcs.attn);
            b.arg(&q)
                .arg(&kc)
                .arg(&vc)
                .arg(&part)
                .arg(&params)
                .arg(&heads)
                .arg(&kvh)
                .arg(&hd_i)
                .arg(&cap)
                .arg(&chunk)
                .arg(&scale);
            launch(b, cfg((sh.heads as u32, splits as u32), ATT_THREADS))?;
            let splits_i = splits as i32;
            let mut b = self.stream.launch_builder(&self.funcs.merge);
            b.arg(&part).arg(&att).arg(&hd_i).arg(&splits_i);
            launch(b, cfg((sh.heads as u32, 1), hd as u32))?;
            self.matvec(l.o, att, 0, x, true)?;
            self.rms_norm(x, l.ffn_norm, xn, sh.hidden)?;
            self.matvec(l.gate, xn, 0, g, false)?;
            self.matvec(l.up, xn, 0, u, false)?;
            let mut b = self.stream.launch_builder(&self.funcs.silu);
            b.arg(&g).arg(&u).arg(&h).arg(&ffn);
            launch(b, cfg((sh.ffn.div_ceil(256) as u32, 1), 256))?;
            self.matvec(l.down, h, 0, x, true)?;
        }
        self.rms_norm(x, self.norm, xn, sh.hidden)?;
        self.matvec(self.lm_head, xn, 0, logits, false)
    }

    fn rms_norm(&self, x: u64, weight: u64, y: u64, n: usize) -> Result<()> {
        let n_i = n as i32;
        let mut b = self.stream.launch_builder(&self.funcs.rms);
        b.arg(&x)
            .arg(&weight)
            .arg(&y)
            .arg(&n_i)
            .arg(&self.shape.eps);
        launch(b, cfg((1, 1), 512))?;
        Ok(())
    }

    /// `y = W·x + bias` (bias 0: none), or `y += W·x` with `accumulate`.
    fn matvec(&self, m: Mat, x: u64, bias: u64, y: u64, accumulate: bool) -> Result<()> {
        // Four rows a warp where there are rows enough to keep every multiprocessor busy.
        let wide = m.n >= WIDE_ROWS;
        let f = match (m.quant, wide) {
            (Quant::Q4K, false) => &self.funcs.q4k,
            (Quant::Q6K, false) => &self.funcs.q6k,
            (Quant::Q4K, true) => &self.funcs.q4k_r4,
            (Quant::Q6K, true) => &self.funcs.q6k_r4,
        };
        let (n, k, acc) = (m.n as i32, m.k as i32, i32::from(accumulate));
        let mut b = self.stream.launch_builder(f);
        b.arg(&m.ptr)
            .arg(&x)
            .arg(&bias)
            .arg(&y)
            .arg(&n)
            .arg(&k)
            .arg(&acc);
        let rows_per_block = MV_ROWS as usize * if wide { 4 } else { 1 };
        let blocks = m.n.div_ceil(rows_per_block) as u32;
        launch(b, cfg((blocks, 1), 32 * MV_ROWS))?;
        Ok(())
    }
}

/// Attention splits for a KV capacity: chunks of at least 16 keys (4 a warp: a warp's keys
/// run one after another), at most 256 splits.
fn attn_splits(capacity: usize) -> usize {
    let chunk = 16usize.max(capacity.div_ceil(256));
    capacity.div_ceil(chunk).max(1)
}

/// The device addresses of a KV buffer pair (contiguous f32 `(1, kv_heads, cap, head_dim)`).
pub(crate) fn kv_ptrs(k: &Tensor, v: &Tensor) -> Result<(u64, u64)> {
    let stream = stream_of(k.device())?;
    Ok((ptr_of(k, &stream)?, ptr_of(v, &stream)?))
}
