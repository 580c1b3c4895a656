//! Hand-written CPU kernels for the encoder's hot spots (other devices use plain candle ops):
//! - GELU with a vectorisable erf (candle's is a scalar libm-style call per element), and a
//!   LayerNorm row, both run in place by the fused dense layers (`fused.rs`);
//! - fused self-attention (a candle custom op) reading queries, keys and values straight out
//!   of the fused QKV projection, one small single-threaded GEMM pair per (sequence, head) in
//!   parallel, softmax with a vectorisable exp, and only over each sequence's real tokens
//!   (padding costs nothing).
//!
//! The element-wise loops are compiled three times (AVX-512, AVX2+FMA, baseline) and picked at
//! run time, so a generic build still uses the machine's widest vectors.

use std::sync::OnceLock;

use candle_core::{bail, CpuStorage, CustomOp2, Layout, Result, Shape, StorageRef, Tensor};
use rayon::prelude::*;

/// Whether `REPOHOP_PORTABLE_KERNELS=1` asks for the portable kernels: no CPU-specific code
/// even where the CPU has it (so that tests on an AVX-512 machine can cover the code other
/// machines run). Read once per process.
pub(crate) fn portable_forced() -> bool {
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("REPOHOP_PORTABLE_KERNELS").is_some_and(|v| v == "1"))
}

/// Whether `REPOHOP_AVX2_KERNELS=1` asks for the AVX2 builds where the CPU has AVX-512 (so that
/// tests on an AVX-512 machine cover the code AVX2 machines run). Read once per process.
pub(crate) fn avx2_forced() -> bool {
    static FORCED: OnceLock<bool> = OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("REPOHOP_AVX2_KERNELS").is_some_and(|v| v == "1"))
}

/// Which build of a [`multiversion`] loop runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VectorIsa {
    /// AVX-512 F/VL with AVX2, FMA and F16C (the features `avx512f` implies).
    Avx512,
    Avx2Fma,
    Portable,
}

/// The widest build this CPU runs, whatever [`portable_forced`] says.
pub(crate) fn detected_vector_isa() -> VectorIsa {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("avx2") && has!("fma") {
            if has!("avx512f") && has!("avx512vl") && has!("f16c") {
                return VectorIsa::Avx512;
            }
            return VectorIsa::Avx2Fma;
        }
    }
    VectorIsa::Portable
}

/// The build of the [`multiversion`] loops that runs, chosen once: [`VectorIsa::Avx512`] or
/// [`VectorIsa::Avx2Fma`] only when the CPU has every feature it is compiled for.
pub(crate) fn vector_isa() -> VectorIsa {
    static ISA: OnceLock<VectorIsa> = OnceLock::new();
    *ISA.get_or_init(|| match detected_vector_isa() {
        _ if portable_forced() => VectorIsa::Portable,
        VectorIsa::Avx512 if avx2_forced() => VectorIsa::Avx2Fma,
        isa => isa,
    })
}

/// Compile `$body` (a loop over slices) for AVX-512, AVX2+FMA and baseline; pick at run time
/// by [`vector_isa`].
macro_rules! multiversion {
    ($vis:vis $name:ident, ($($arg:ident : $ty:ty),*), $body:expr) => {
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                use $crate::embed::kernels::{vector_isa, VectorIsa};
                /// # Safety
                /// The CPU must have AVX-512 F/VL, AVX2, FMA and F16C.
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn wide($($arg: $ty),*) { $body }
                /// # Safety
                /// The CPU must have AVX2 and FMA.
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) { $body }
                match vector_isa() {
                    // SAFETY: `vector_isa` picks Avx512 only when every feature is detected.
                    VectorIsa::Avx512 => return unsafe { wide($($arg),*) },
                    // SAFETY: `vector_isa` picks Avx2Fma only when AVX2 and FMA are detected.
                    VectorIsa::Avx2Fma => return unsafe { avx2($($arg),*) },
                    VectorIsa::Portable => {}
                }
            }
            $body
        }
    };
}
pub(crate) use multiversion;

/// erf(x) to about 1e-7 absolute: a rational approximation in x² on [-4, 4] (the form used by
/// Eigen and XLA), branch-free so loops over it vectorise.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = p.mul_add(x2, 2.770_681_4e-8);
    p = p.mul_add(x2, -2.101_024e-6);
    p = p.mul_add(x2, -5.692_506_4e-5);
    p = p.mul_add(x2, -7.349_906e-4);
    p = p.mul_add(x2, -2.954_600_2e-3);
    p = p.mul_add(x2, -1.609_603_4e-2);
    let mut q = -1.456_607_2e-5_f32;
    q = q.mul_add(x2, -2.133_740_6e-4);
    q = q.mul_add(x2, -1.682_827e-3);
    q = q.mul_add(x2, -7.373_329_5e-3);
    q = q.mul_add(x2, -1.426_474e-2);
    x * p / q
}

/// e^x for x ≤ 0 (softmax after subtracting the row maximum), relative error ~2e-7:
/// 2^n · p(r) with n = round(x / ln 2), r = x − n ln 2, p a degree-6 Taylor polynomial.
/// No float-to-integer cast: Rust's saturating cast compiles to a scalar compare per lane,
/// which kept the loops that call this from vectorising. Adding 1.5 · 2^23 instead rounds
/// to an integer that the sum's low mantissa bits hold, and those bits make the exponent.
#[inline(always)]
pub fn exp_neg(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    let x = x.max(-87.0);
    let t = x * std::f32::consts::LOG2_E + SHIFT;
    let n = t - SHIFT;
    let r = n.mul_add(-0.693_145_75, x);
    let r = n.mul_add(-1.428_606_8e-6, r);
    let mut p = 1.0 / 720.0_f32;
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // t's bits are SHIFT's plus n (n ≥ −126 here), so this is the biased exponent n + 127.
    p * f32::from_bits(t.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23)
}

multiversion!(pub(crate) gelu_in_place, (xs: &mut [f32]), {
    for x in xs.iter_mut() {
        *x = 0.5 * *x * (1.0 + erf(*x * std::f32::consts::FRAC_1_SQRT_2));
    }
});

// LayerNorm of one row in place: `(x − mean) / sqrt(var + eps) · gamma + beta`.
multiversion!(pub(crate) layer_norm_row, (row: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32), {
    let n = row.len() as f32;
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (s, &x) in sums.iter_mut().zip(c) {
            *s += x;
        }
    }
    let mean = (sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()) / n;
    let mut sq = [0f32; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (s, &x) in sq.iter_mut().zip(c) {
            *s += (x - mean) * (x - mean);
        }
    }
    let tail: f32 = chunks.remainder().iter().map(|&x| (x - mean) * (x - mean)).sum();
    let inv = 1.0 / ((sq.iter().sum::<f32>() + tail) / n + eps).sqrt();
    for ((x, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
        *x = (*x - mean) * inv * g + b;
    }
});

/// Lanes of the row reductions (softmax, LayerNorm): one AVX-512 register. A float sum or
/// maximum folded element by element is a chain the compiler may not reorder, which kept the
/// whole loop scalar; sixteen independent partial results vectorise.
const LANES: usize = 16;

// In place: `row[j] = exp(row[j] - max)` over the row, then divided by the sum.
multiversion!(pub(crate) softmax_row, (row: &mut [f32]), {
    let mut maxes = [f32::NEG_INFINITY; LANES];
    let mut chunks = row.chunks_exact(LANES);
    for c in &mut chunks {
        for (m, &x) in maxes.iter_mut().zip(c) {
            *m = m.max(x);
        }
    }
    let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let max = maxes.iter().fold(tail, |m, &x| m.max(x));
    let mut sums = [0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for c in &mut chunks {
        for (s, x) in sums.iter_mut().zip(c.iter_mut()) {
            *x = exp_neg(*x - max);
            *s += *x;
        }
    }
    let mut sum = 0f32;
    for x in chunks.into_remainder() {
        *x = exp_neg(*x - max);
        sum += *x;
    }
    let inv = 1.0 / (sum + sums.iter().sum::<f32>());
    for x in row.iter_mut() {
        *x *= inv;
    }
});

/// A strided f32 matrix: element (i, j) at `ptr + i·row + j·col`.
#[derive(Clone, Copy)]
pub(crate) struct MatRef {
    ptr: *const f32,
    row: isize,
    col: isize,
}

impl MatRef {
    pub(crate) fn new(ptr: *const f32, row: isize, col: isize) -> Self {
        Self { ptr, row, col }
    }
}

/// `dst = scale · a · b` for an `m×k` `a` and a `k×n` `b`, on the calling thread, overwriting
/// `dst` (rows `dst_row` apart, columns contiguous).
///
/// # Safety
/// Every element the shapes and strides address must lie inside its buffer, and `dst` must not
/// overlap `a` or `b`.
pub(crate) unsafe fn matmul_into(
    dst: *mut f32,
    dst_row: isize,
    a: MatRef,
    b: MatRef,
    (m, n, k): (usize, usize, usize),
    scale: f32,
) {
    // SAFETY: gemm touches exactly the elements the shapes and strides address (each matrix
    // passed as column stride, then row stride), which the caller guarantees are in bounds
    // and disjoint; `read_dst` is false, so `dst` need not be initialised.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_row,
            false,
            a.ptr,
            a.col,
            a.row,
            b.ptr,
            b.col,
            b.row,
            0.0,
            scale,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The data of a contiguous f32 tensor on the CPU, borrowed from its storage guard.
pub(crate) fn host_f32<'a>(guard: &'a StorageRef<'_>, layout: &Layout) -> Result<&'a [f32]> {
    let candle_core::Storage::Cpu(cpu) = &**guard else {
        bail!("expected a CPU tensor")
    };
    cpu_f32(cpu, layout, "tensor")
}

fn cpu_f32<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = s else {
        bail!("{what}: expected f32")
    };
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{what}: expected a contiguous tensor"),
    }
}

/// Attention for a right- or left-padded encoder batch; see [`encoder_attention`].
struct EncoderAttention {
    batch: usize,
    len: usize,
    heads: usize,
    head_dim: usize,
}

/// A raw pointer to the output that tasks writing disjoint parts may share.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every (sequence, head) task writes only its own rows × head columns, and rayon
// joins the tasks before the output is read.
unsafe impl Send for OutPtr {}
// SAFETY: as for `Send`: shared use only ever writes disjoint parts.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `offset` must stay inside the output buffer.
    unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller keeps `offset` inside the buffer `self.0` points to.
        unsafe { self.0.add(offset) }
    }
}

impl CustomOp2 for EncoderAttention {
    fn name(&self) -> &'static str {
        "encoder-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let qkv = cpu_f32(s1, l1, "attention qkv")?;
        let mask = cpu_f32(s2, l2, "attention mask")?;
        let (b, l, h, dh) = (self.batch, self.len, self.heads, self.head_dim);
        let d = h * dh;
        if qkv.len() != b * l * 3 * d || mask.len() != b * l {
            bail!(
                "attention: qkv {} / mask {} do not match {b}×{l}×{h}×{dh}",
                qkv.len(),
                mask.len()
            );
        }
        // Each sequence's real tokens are one contiguous run (left or right padding).
        let mut spans = Vec::with_capacity(b);
        for r in 0..b {
            let row = &mask[r * l..(r + 1) * l];
            let start = row.iter().position(|&m| m > 0.5).unwrap_or(0);
            let end = l - row.iter().rev().position(|&m| m > 0.5).unwrap_or(l - start);
            if row[start..end].iter().any(|&m| m < 0.5) {
                bail!("attention: the mask of row {r} has holes");
            }
            spans.push((start, end));
        }
        let mut out = vec![0f32; b * l * d];
        let out_ptr = OutPtr(out.as_mut_ptr());
        let scale = 1.0 / (dh as f32).sqrt();
        (0..b * h)
            .into_par_iter()
            .for_each_init(Vec::new, |scores, task| {
                let (r, head) = (task / h, task % h);
                let (start, end) = spans[r];
                let n = end - start;
                if n == 0 {
                    return;
                }
                scores.resize(n * n, 0.0);
                let row0 = (r * l + start) * 3 * d;
                let q = qkv[row0 + head * dh..].as_ptr();
                let k = qkv[row0 + d + head * dh..].as_ptr();
                let v = qkv[row0 + 2 * d + head * dh..].as_ptr();
                let rs = (3 * d) as isize;
                // SAFETY: all pointers stay inside `qkv` (n rows of stride 3d from the sequence's
                // first real row, dh columns), `scores` (n×n) and this task's block of `out`.
                unsafe {
                    // scores = scale · Q Kᵀ
                    let q = MatRef::new(q, rs, 1);
                    let kt = MatRef::new(k, 1, rs);
                    matmul_into(scores.as_mut_ptr(), n as isize, q, kt, (n, n, dh), scale);
                }
                for row in scores.chunks_mut(n) {
                    softmax_row(row);
                }
                // SAFETY: row r·l + start, column head·dh lies inside `out` (b·l rows of d).
                let dst = unsafe { out_ptr.at((r * l + start) * d + head * dh) };
                // SAFETY: as above; rows start..end, columns head·dh.. of `out`.
                unsafe {
                    let p = MatRef::new(scores.as_ptr(), n as isize, 1);
                    let v = MatRef::new(v, rs, 1);
                    matmul_into(dst, d as isize, p, v, (n, dh, n), 1.0);
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((b * l, d))))
    }
}

/// Self-attention of an encoder batch without an attention bias beyond padding.
/// `qkv`: (batch·len, 3·heads·head_dim) as produced by the fused projection (queries, then keys,
/// then values, heads side by side); `mask`: (batch, len) f32, 1 for real tokens, whose real
/// tokens must be contiguous. Returns the context (batch·len, heads·head_dim); padding rows are
/// zero.
pub fn encoder_attention(
    qkv: &Tensor,
    mask: &Tensor,
    batch: usize,
    len: usize,
    heads: usize,
    head_dim: usize,
) -> Result<Tensor> {
    let op = EncoderAttention {
        batch,
        len,
        heads,
        head_dim,
    };
    qkv.contiguous()?.apply_op2_no_bwd(&mask.contiguous()?, &op)
}

/// Asserts that the loops run the build `REPOHOP_PORTABLE_KERNELS` asks for: the portable one
/// when it is `1` (the test script's second run), else the widest this CPU has. Every kernel
/// test calls it, so that the two runs cannot silently test the same build twice.
#[cfg(test)]
pub(crate) fn assert_dispatch_follows_env() {
    let env = |name: &str| std::env::var_os(name).is_some_and(|v| v == "1");
    let (portable, avx2) = (env("REPOHOP_PORTABLE_KERNELS"), env("REPOHOP_AVX2_KERNELS"));
    assert_eq!((portable_forced(), avx2_forced()), (portable, avx2));
    let want = match detected_vector_isa() {
        _ if portable => VectorIsa::Portable,
        VectorIsa::Avx512 if avx2 => VectorIsa::Avx2Fma,
        isa => isa,
    };
    assert_eq!(
        vector_isa(),
        want,
        "REPOHOP_PORTABLE_KERNELS={portable} REPOHOP_AVX2_KERNELS={avx2}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_and_exp_are_accurate() {
        assert_dispatch_follows_env();
        let mut worst_erf = 0.0f64;
        let mut worst_exp = 0.0f64;
        for i in -6000..=6000 {
            let x = i as f32 / 1000.0;
            let want = candle_core::cpu::erf::erf_f64(x as f64);
            worst_erf = worst_erf.max((erf(x) as f64 - want).abs());
            if x <= 0.0 {
                let y = x * 10.0;
                let want = (y as f64).exp();
                let got = exp_neg(y) as f64;
                worst_exp = worst_exp.max(((got - want) / want).abs());
            }
        }
        assert!(worst_erf < 5e-7, "erf error {worst_erf}");
        assert!(worst_exp < 1e-6, "exp relative error {worst_exp}");
        assert_eq!(exp_neg(-1e30), exp_neg(-87.0));
        assert!(exp_neg(-1e30) < 1e-37);
    }

    #[test]
    fn softmax_rows_of_any_length_match_a_double_precision_softmax() {
        assert_dispatch_follows_env();
        for n in [1usize, 5, 16, 17, 40, 257] {
            let row: Vec<f32> = (0..n).map(|i| ((i * 37 % 11) as f32 - 5.0) * 1.7).collect();
            let max = row.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
            let exps: Vec<f64> = row.iter().map(|&x| (x as f64 - max).exp()).collect();
            let sum: f64 = exps.iter().sum();
            let mut got = row.clone();
            softmax_row(&mut got);
            for (g, e) in got.iter().zip(&exps) {
                assert!(
                    (*g as f64 - e / sum).abs() < 1e-6,
                    "n {n}: {g} vs {}",
                    e / sum
                );
            }
        }
    }

    #[test]
    fn gelu_matches_candle() {
        assert_dispatch_follows_env();
        let xs: Vec<f32> = (-500..500).map(|i| i as f32 / 50.0).collect();
        let t = Tensor::new(xs.as_slice(), &candle_core::Device::Cpu).unwrap();
        let mut a = xs.clone();
        gelu_in_place(&mut a);
        let b = t.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() < 1e-6, "{x} vs {y}");
        }
    }

    #[test]
    fn fused_attention_matches_candle_ops() {
        assert_dispatch_follows_env();
        let dev = candle_core::Device::Cpu;
        let (b, l, h, dh) = (3, 5, 2, 4);
        let d = h * dh;
        let qkv = Tensor::randn(0f32, 1.0, (b * l, 3 * d), &dev).unwrap();
        // Row 0 full, row 1 right-padded to 3, row 2 left-padded to 2.
        let m: Vec<f32> = [
            [1., 1., 1., 1., 1.],
            [1., 1., 1., 0., 0.],
            [0., 0., 0., 1., 1.],
        ]
        .concat();
        let mask = Tensor::from_vec(m.clone(), (b, l), &dev).unwrap();
        let got = encoder_attention(&qkv, &mask, b, l, h, dh).unwrap();
        let parts = qkv
            .reshape((b, l, 3, h, dh))
            .unwrap()
            .permute((2, 0, 3, 1, 4))
            .unwrap()
            .contiguous()
            .unwrap();
        let bias = ((mask.clone() - 1.0).unwrap() * 1e30)
            .unwrap()
            .reshape((b, 1, 1, l))
            .unwrap();
        let want = crate::embed::ops::attention(
            &parts.get(0).unwrap(),
            &parts.get(1).unwrap(),
            &parts.get(2).unwrap(),
            &bias,
        )
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .reshape((b * l, d))
        .unwrap();
        let (g, w) = (
            got.to_vec2::<f32>().unwrap(),
            want.to_vec2::<f32>().unwrap(),
        );
        for row in 0..b * l {
            if m[row] < 0.5 {
                continue; // padding rows are not used downstream
            }
            for c in 0..d {
                assert!(
                    (g[row][c] - w[row][c]).abs() < 1e-5,
                    "row {row} col {c}: {} vs {}",
                    g[row][c],
                    w[row][c]
                );
            }
        }
    }
}
