//! CPU kernels for the decoder's work between the quantized matmuls: RMS norm, the fused
//! SiLU gate, and attention with its bias, per-head norms, rotary embedding and KV append.
//!
//! They run on candle's barrier pool, the threads that run the quantized matmuls (and spin
//! between them), rather than on rayon's pool as candle-nn's ops do: on a machine with as
//! many cores as threads, a second pool's threads compete with the spinning ones for the
//! cores. Attention also skips the masked half of causal prefill and the copies that
//! transposes, masks and KV concatenation cost through tensor ops.

use std::ops::Range;

use candle_core::{bail, Result, Tensor};

pub(crate) use crate::embed::kernels::host_f32;
use crate::embed::kernels::{exp_neg, multiversion, softmax_row};

/// Below this many elements of work a kernel runs on the calling thread.
const PAR_MIN_ELEMS: usize = 32 * 1024;

/// Runs `f` over `0..n_items`, split over the barrier pool when `n_items × cost` is large.
fn par_ranges(n_items: usize, cost: usize, f: impl Fn(Range<usize>) + Sync) {
    if n_items > 1 && n_items * cost >= PAR_MIN_ELEMS {
        candle_core::utils::barrier_pool().execute_chunked(n_items, f);
    } else if n_items > 0 {
        f(0..n_items);
    }
}

/// A raw pointer that parallel units write through, each to its own disjoint part.
#[derive(Clone, Copy)]
pub(super) struct SharedMut(pub(super) *mut f32);
// SAFETY: units write disjoint index ranges, and the pool joins before the owner reads.
unsafe impl Send for SharedMut {}
// SAFETY: as for `Send`: shared use only ever writes disjoint ranges.
unsafe impl Sync for SharedMut {}

impl SharedMut {
    /// # Safety
    /// `offset..offset + len` must lie inside the buffer and be written by this unit only.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slice(&self, offset: usize, len: usize) -> &mut [f32] {
        // SAFETY: in bounds and not aliased, by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.at(offset), len) }
    }

    /// # Safety
    /// `offset` must lie inside the buffer.
    pub(super) unsafe fn at(&self, offset: usize) -> *mut f32 {
        // SAFETY: in bounds, by the caller's contract.
        unsafe { self.0.add(offset) }
    }
}

/// `x / rms(x) * w` over one row, into `out`.
#[inline]
fn rms_norm_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
    let inv = 1.0 / (ms + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = v * inv * g;
    }
}

/// RMS norm over the last dimension of a contiguous f32 CPU tensor.
pub(crate) fn rms_norm(x: &Tensor, w: &Tensor, eps: f32) -> Result<Tensor> {
    let d = x.dim(candle_core::D::Minus1)?;
    let rows = x.elem_count() / d.max(1);
    let mut out = vec![0f32; x.elem_count()];
    {
        let (xg, xl) = x.storage_and_layout();
        let (wg, wl) = w.storage_and_layout();
        let (xs, ws) = (host_f32(&xg, xl)?, host_f32(&wg, wl)?);
        if ws.len() != d {
            bail!("rms_norm: weight of {} for rows of {d}", ws.len());
        }
        let dst = SharedMut(out.as_mut_ptr());
        par_ranges(rows, d, |range| {
            for r in range {
                // SAFETY: row r of `out`, written by this unit only.
                let o = unsafe { dst.slice(r * d, d) };
                rms_norm_row(&xs[r * d..(r + 1) * d], ws, eps, o);
            }
        });
    }
    Tensor::from_vec(out, x.shape(), x.device())
}

// `out = silu(g) · u` with the vectorisable exp: e = exp(-|g|) ≤ 1, so sigmoid(g) is
// 1 / (1 + e) for g ≥ 0 and e / (1 + e) below.
multiversion!(silu_mul_slice, (g: &[f32], u: &[f32], out: &mut [f32]), {
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        let e = exp_neg(-g.abs());
        let sig = if g >= 0.0 { 1.0 } else { e } / (1.0 + e);
        *o = g * sig * u;
    }
});

/// `silu(gate) * up`, element-wise, of two contiguous f32 CPU tensors of one shape.
pub(crate) fn silu_mul(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.shape() != up.shape() {
        bail!("silu_mul: shapes {:?} and {:?}", gate.shape(), up.shape());
    }
    let len = gate.elem_count();
    let mut out = vec![0f32; len];
    {
        let (gg, gl) = gate.storage_and_layout();
        let (ug, ul) = up.storage_and_layout();
        let (gs, us) = (host_f32(&gg, gl)?, host_f32(&ug, ul)?);
        const CHUNK: usize = 4096;
        let dst = SharedMut(out.as_mut_ptr());
        par_ranges(len.div_ceil(CHUNK), CHUNK, |range| {
            for c in range {
                let (a, b) = (c * CHUNK, len.min((c + 1) * CHUNK));
                // SAFETY: chunk c of `out`, written by this unit only.
                let o = unsafe { dst.slice(a, b - a) };
                silu_mul_slice(&gs[a..b], &us[a..b], o);
            }
        });
    }
    Tensor::from_vec(out, gate.shape(), gate.device())
}

/// One layer's keys and values on the CPU: `[kv_head][capacity][head_dim]` each, valid for
/// the first `len` positions the model tracks.
///
/// Invariant, relied on by the unchecked reads and writes of [`attention`]: `k` and `v` hold
/// exactly `kv_heads × cap × head_dim` values. The fields are private so that only
/// [`HostKv::new`] and [`HostKv::resize`] set them.
pub(crate) struct HostKv {
    k: Vec<f32>,
    v: Vec<f32>,
    kv_heads: usize,
    head_dim: usize,
    cap: usize,
}

impl HostKv {
    /// An empty cache (capacity 0) for `kv_heads` heads of `head_dim` values.
    pub fn new(kv_heads: usize, head_dim: usize) -> Self {
        Self {
            k: Vec::new(),
            v: Vec::new(),
            kv_heads,
            head_dim,
            cap: 0,
        }
    }

    /// Positions the buffers hold.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Bytes held by the buffers.
    pub fn bytes(&self) -> usize {
        (self.k.len() + self.v.len()) * std::mem::size_of::<f32>()
    }

    /// Reallocates to `new_cap` positions, keeping the first `keep` of each head.
    pub fn resize(&mut self, new_cap: usize, keep: usize) -> Result<()> {
        (self.k, self.v) = self.relaid(new_cap, keep)?;
        self.cap = new_cap;
        Ok(())
    }

    /// A new cache holding a copy of the first `len` positions (capacity `len`).
    pub fn copy_prefix(&self, len: usize) -> Result<HostKv> {
        let len = len.min(self.cap);
        let (k, v) = self.relaid(len, len)?;
        Ok(HostKv {
            k,
            v,
            cap: len,
            ..HostKv::new(self.kv_heads, self.head_dim)
        })
    }

    /// Keys and values laid out for `new_cap` positions, the first `keep` of each head copied.
    fn relaid(&self, new_cap: usize, keep: usize) -> Result<(Vec<f32>, Vec<f32>)> {
        let (kvh, hd) = (self.kv_heads, self.head_dim);
        let Some(len) = kvh.checked_mul(new_cap).and_then(|x| x.checked_mul(hd)) else {
            bail!("a KV cache of {new_cap} positions of {kvh} heads of {hd} is too large")
        };
        let keep = keep.min(new_cap).min(self.cap);
        let mut k = vec![0f32; len];
        let mut v = vec![0f32; len];
        for g in 0..kvh {
            let (src, dst) = (g * self.cap * hd, g * new_cap * hd);
            let n = keep * hd;
            k[dst..dst + n].copy_from_slice(&self.k[src..src + n]);
            v[dst..dst + n].copy_from_slice(&self.v[src..src + n]);
        }
        Ok((k, v))
    }
}

/// Head layout and the per-layer extras of one attention block.
pub(crate) struct AttnParams<'a> {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub eps: f32,
    pub q_bias: Option<&'a [f32]>,
    pub k_bias: Option<&'a [f32]>,
    pub v_bias: Option<&'a [f32]>,
    pub q_norm: Option<&'a [f32]>,
    pub k_norm: Option<&'a [f32]>,
    /// Rotary tables `(positions, head_dim / 2)` from position 0.
    pub cos: &'a [f32],
    pub sin: &'a [f32],
}

/// Bias, optional RMS norm, then the rotary embedding (halves convention) of one head, in
/// place; `cos`/`sin` are this position's rows.
#[inline]
fn finish_head(
    x: &mut [f32],
    bias: Option<&[f32]>,
    norm: Option<&[f32]>,
    eps: f32,
    cs: (&[f32], &[f32]),
) {
    if let Some(b) = bias {
        for (x, b) in x.iter_mut().zip(b) {
            *x += b;
        }
    }
    if let Some(w) = norm {
        let ms = x.iter().map(|v| v * v).sum::<f32>() / x.len() as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for (x, g) in x.iter_mut().zip(w) {
            *x *= inv * g;
        }
    }
    let half = x.len() / 2;
    let (lo, hi) = x.split_at_mut(half);
    for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cs.0).zip(cs.1) {
        let (x1, x2) = (*a, *b);
        *a = x1 * c - x2 * s;
        *b = x1 * s + x2 * c;
    }
}

/// `x · y` with 16 partial sums, so it vectorises (the order of the sums is fixed).
#[inline(always)]
fn dot(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (xc, yc) = (x.chunks_exact(16), y.chunks_exact(16));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in xc.zip(yc) {
        for l in 0..16 {
            acc[l] = a[l].mul_add(b[l], acc[l]);
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Cached rows read this far ahead of the one being used are asked for early: the key and
/// value rows of a long context come from memory, and the hardware prefetcher alone left
/// the attention loops waiting on them.
const KV_AHEAD_ROWS: usize = 8;

/// Asks for the cache lines of `row` (any length) ahead of use; a hint, with no effect on results.
#[inline(always)]
fn prefetch_row(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: a prefetch only hints the cache; the address is inside `row`.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// [`group_scores`] for `G` heads and a head size that is a multiple of 16: each key's chunk
/// of 16 is loaded once for the `G` heads, whose `G` running sums are independent (one sum
/// per dot product made each fused multiply-add wait for the previous one).
#[inline(always)]
fn group_scores_of<const G: usize>(
    q: &[f32],
    keys: &[f32],
    hd: usize,
    scale: f32,
    scores: &mut [f32],
) {
    let len = keys.len() / hd;
    for (t, k) in keys.chunks_exact(hd).enumerate() {
        if let Some(ahead) = keys.get((t + KV_AHEAD_ROWS) * hd..(t + KV_AHEAD_ROWS + 1) * hd) {
            prefetch_row(ahead);
        }
        let mut acc = [[0f32; 16]; G];
        for (c, kc) in k.chunks_exact(16).enumerate() {
            for (j, a) in acc.iter_mut().enumerate() {
                let qc = &q[j * hd + c * 16..j * hd + c * 16 + 16];
                for l in 0..16 {
                    a[l] = qc[l].mul_add(kc[l], a[l]);
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            scores[j * len + t] = a.iter().sum::<f32>() * scale;
        }
    }
}

/// [`group_values`] for `G` heads and a head size that is a multiple of 32: 32 output values
/// of every head stay in registers while all value rows stream past, instead of each row's
/// products being added to the outputs in memory.
#[inline(always)]
fn group_values_of<const G: usize>(p: &[f32], values: &[f32], hd: usize, out: &mut [f32]) {
    let len = values.len() / hd;
    for c in (0..hd).step_by(32) {
        let mut acc = [[0f32; 32]; G];
        for (t, v) in values.chunks_exact(hd).enumerate() {
            let at = (t + 4 * KV_AHEAD_ROWS) * hd + c;
            if let Some(ahead) = values.get(at..at + 32) {
                prefetch_row(ahead);
            }
            let v = &v[c..c + 32];
            for (j, a) in acc.iter_mut().enumerate() {
                let w = p[j * len + t];
                for l in 0..32 {
                    a[l] = w.mul_add(v[l], a[l]);
                }
            }
        }
        for (j, a) in acc.iter().enumerate() {
            out[j * hd + c..j * hd + c + 32].copy_from_slice(a);
        }
    }
}

/// Calls `$f::<G>` for the group sizes models have (1 to 8 query heads per key/value head),
/// `$other` for the rest.
macro_rules! by_group_size {
    ($g:expr, $f:ident($($arg:expr),*), $other:expr) => {
        match $g {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            8 => $f::<8>($($arg),*),
            _ => $other,
        }
    };
}

// One query row's heads of a KV group (side by side in `q`, `hd` each) against the group's
// cached keys (`hd` apart): `scores[j·len + t] = scale · q_j · k_t`, each key read once.
multiversion!(group_scores, (q: &[f32], keys: &[f32], hd: usize, scale: f32, scores: &mut [f32]), {
    let heads = q.len() / hd;
    let generic = |scores: &mut [f32]| {
        let len = keys.len() / hd;
        for (t, k) in keys.chunks_exact(hd).enumerate() {
            for (j, qj) in q.chunks_exact(hd).enumerate() {
                scores[j * len + t] = dot(qj, k) * scale;
            }
        }
    };
    if hd.is_multiple_of(16) {
        by_group_size!(heads, group_scores_of(q, keys, hd, scale, scores), generic(scores))
    } else {
        generic(scores)
    }
});

// `out_j = Σ_t p[j·len + t] · v_t` for each head j of the group, each value row read once.
multiversion!(group_values, (p: &[f32], values: &[f32], hd: usize, out: &mut [f32]), {
    let heads = out.len() / hd;
    let generic = |out: &mut [f32]| {
        let len = values.len() / hd;
        out.fill(0.0);
        for (t, v) in values.chunks_exact(hd).enumerate() {
            for (j, o) in out.chunks_exact_mut(hd).enumerate() {
                let w = p[j * len + t];
                for (o, &x) in o.iter_mut().zip(v) {
                    *o = w.mul_add(x, *o);
                }
            }
        }
    };
    if hd.is_multiple_of(32) {
        by_group_size!(heads, group_values_of(p, values, hd, out), generic(out))
    } else {
        generic(out)
    }
});

/// The prefill kernels written for AVX-512 registers, several query rows per pass: the same
/// operations per row as [`tile_scores`] and [`rows_values`] (which the compiler lays out
/// with more loads and spills), so the results are those bits too.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::KEY_TILE;
    use core::arch::x86_64::*;

    /// [`super::tile_scores`] for 4 query rows (`q`, rows `q_stride` apart) over the first
    /// `tiles` key tiles, into `out` (rows `out_stride` apart): each tile's vector of 16 keys
    /// is loaded once for the 4 rows, 4 of the 16 running sums at a time.
    ///
    /// # Safety
    /// AVX-512F must be available; `q` must hold 4 rows of `hd` values (a multiple of 16),
    /// `kt` `tiles × hd × 16` values, `out` 4 rows of `tiles × 16`, written by no one else.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn tile_scores4(
        q: *const f32,
        q_stride: usize,
        kt: *const f32,
        tiles: usize,
        hd: usize,
        scale: f32,
        out: *mut f32,
        out_stride: usize,
    ) {
        // SAFETY: every address below is inside the buffers the caller vouches for, and
        // AVX-512F is available.
        unsafe {
            let scale = _mm512_set1_ps(scale);
            for t in 0..tiles {
                let tile = kt.add(t * hd * KEY_TILE);
                let mut s = [_mm512_set1_ps(-0.0); 4];
                for quarter in 0..4 {
                    let mut acc = [[_mm512_setzero_ps(); 4]; 4];
                    for c in 0..hd / 16 {
                        for (l, lane) in (c * 16 + quarter * 4..).take(4).enumerate() {
                            let k = _mm512_loadu_ps(tile.add(lane * KEY_TILE));
                            for (r, a) in acc.iter_mut().enumerate() {
                                let x = _mm512_set1_ps(*q.add(r * q_stride + lane));
                                a[l] = _mm512_fmadd_ps(x, k, a[l]);
                            }
                        }
                    }
                    for (s, a) in s.iter_mut().zip(&acc) {
                        for &a in a {
                            *s = _mm512_add_ps(*s, a);
                        }
                    }
                }
                for (r, &s) in s.iter().enumerate() {
                    _mm512_storeu_ps(
                        out.add(r * out_stride + t * KEY_TILE),
                        _mm512_mul_ps(s, scale),
                    );
                }
            }
        }
    }

    /// [`super::rows_values`] for 8 query rows: row r's `lens[r]` probabilities at
    /// `p + r·p_stride`, its `hd` outputs at `out + r·out_stride`; 32 outputs of each row in
    /// registers while the value rows stream past once.
    ///
    /// # Safety
    /// AVX-512F must be available; `p` must hold each row's `lens[r]` values, `values` the
    /// largest `lens[r]` rows of `hd` (a multiple of 32), `out` each row's `hd` values, written
    /// by no one else.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn rows_values8(
        p: *const f32,
        p_stride: usize,
        lens: [usize; 8],
        values: *const f32,
        hd: usize,
        out: *mut f32,
        out_stride: usize,
    ) {
        let common = lens.iter().copied().min().unwrap_or(0);
        let longest = lens.iter().copied().max().unwrap_or(0);
        // SAFETY: every address below is inside the buffers the caller vouches for, and
        // AVX-512F is available.
        unsafe {
            for c in (0..hd).step_by(32) {
                let mut acc = [[_mm512_setzero_ps(); 2]; 8];
                for t in 0..common {
                    let v0 = _mm512_loadu_ps(values.add(t * hd + c));
                    let v1 = _mm512_loadu_ps(values.add(t * hd + c + 16));
                    for (r, a) in acc.iter_mut().enumerate() {
                        let w = _mm512_set1_ps(*p.add(r * p_stride + t));
                        a[0] = _mm512_fmadd_ps(w, v0, a[0]);
                        a[1] = _mm512_fmadd_ps(w, v1, a[1]);
                    }
                }
                // The rows' lengths differ only in the block's last positions.
                for t in common..longest {
                    let v0 = _mm512_loadu_ps(values.add(t * hd + c));
                    let v1 = _mm512_loadu_ps(values.add(t * hd + c + 16));
                    for (r, a) in acc.iter_mut().enumerate().filter(|(r, _)| t < lens[*r]) {
                        let w = _mm512_set1_ps(*p.add(r * p_stride + t));
                        a[0] = _mm512_fmadd_ps(w, v0, a[0]);
                        a[1] = _mm512_fmadd_ps(w, v1, a[1]);
                    }
                }
                for (r, a) in acc.iter().enumerate() {
                    _mm512_storeu_ps(out.add(r * out_stride + c), a[0]);
                    _mm512_storeu_ps(out.add(r * out_stride + c + 16), a[1]);
                }
            }
        }
    }
}

/// Query rows per attention unit in prefill: each key tile and value row is read once for them.
const QUERY_BLOCK: usize = 32;
/// Keys per transposed tile in prefill: one vector of scores.
const KEY_TILE: usize = 16;
/// Query rows whose weighted values are summed together in prefill.
const VALUE_ROWS: usize = 8;

/// The first `total` keys of each KV group transposed in tiles of [`KEY_TILE`] positions, for
/// [`tile_scores`]: group g's tile t holds `tiles[((g·tiles_per_group + t)·hd + d)·16 + i]`
/// = key `16t + i`, value d; zeros past `total`. `keys` holds `kvh × cap × hd` values.
fn key_tiles(keys: &[f32], cap: usize, kvh: usize, hd: usize, total: usize) -> Vec<f32> {
    let per_group = total.div_ceil(KEY_TILE);
    let mut tiles = vec![0f32; kvh * per_group * KEY_TILE * hd];
    let dst = SharedMut(tiles.as_mut_ptr());
    par_ranges(kvh * per_group, KEY_TILE * hd, |range| {
        for unit in range {
            let (g, t) = (unit / per_group, unit % per_group);
            // SAFETY: tile t of group g (16·hd values inside `tiles`) belongs to this unit only.
            let tile = unsafe { dst.slice(unit * KEY_TILE * hd, KEY_TILE * hd) };
            for i in 0..KEY_TILE.min(total - t * KEY_TILE) {
                let key = &keys[(g * cap + t * KEY_TILE + i) * hd..][..hd];
                for (d, &x) in key.iter().enumerate() {
                    tile[d * KEY_TILE + i] = x;
                }
            }
        }
    });
    tiles
}

// `out[16t + i] = scale · q · key(16t + i)` over transposed key tiles (see [`key_tiles`];
// `hd` a multiple of 16), with [`group_scores`]' operations for each key: 16 running sums,
// lane l over values l, l + 16, …, added lane by lane in order, then scaled. The 16 keys of
// a tile are the vector lanes here, so no sum crosses lanes.
multiversion!(tile_scores, (q: &[f32], kt: &[f32], hd: usize, scale: f32, out: &mut [f32]), {
    for (tile, o) in kt.chunks_exact(hd * KEY_TILE).zip(out.chunks_exact_mut(KEY_TILE)) {
        let mut acc = [[0f32; KEY_TILE]; 16];
        for c in 0..hd / 16 {
            for (l, a) in acc.iter_mut().enumerate() {
                let x = q[c * 16 + l];
                let k = &tile[(c * 16 + l) * KEY_TILE..][..KEY_TILE];
                for i in 0..KEY_TILE {
                    a[i] = x.mul_add(k[i], a[i]);
                }
            }
        }
        // `Iterator::sum` of f32 starts from -0.0, which leaves the first term as it is.
        let mut s = [-0.0f32; KEY_TILE];
        for a in &acc {
            for i in 0..KEY_TILE {
                s[i] += a[i];
            }
        }
        for i in 0..KEY_TILE {
            o[i] = s[i] * scale;
        }
    }
});

/// [`rows_values`] for `R` rows: 32 output values of every row stay in registers while the
/// value rows stream past once for all of them.
#[inline(always)]
fn rows_values_of<const R: usize>(p: [&[f32]; R], values: &[f32], hd: usize, out: [&mut [f32]; R]) {
    let common = p.iter().map(|p| p.len()).min().unwrap_or(0);
    let longest = p.iter().map(|p| p.len()).max().unwrap_or(0);
    let head: [&[f32]; R] = std::array::from_fn(|r| &p[r][..common]);
    for c in (0..hd).step_by(32) {
        let mut acc = [[0f32; 32]; R];
        for t in 0..common {
            let v = &values[t * hd + c..][..32];
            for r in 0..R {
                let w = head[r][t];
                for l in 0..32 {
                    acc[r][l] = w.mul_add(v[l], acc[r][l]);
                }
            }
        }
        // The rows' lengths differ by a few positions at the end of the block.
        for t in common..longest {
            let v = &values[t * hd + c..][..32];
            for r in 0..R {
                if let Some(&w) = p[r].get(t) {
                    for l in 0..32 {
                        acc[r][l] = w.mul_add(v[l], acc[r][l]);
                    }
                }
            }
        }
        for r in 0..R {
            out[r][c..c + 32].copy_from_slice(&acc[r]);
        }
    }
}

// `out[r] = Σ_t p[r][t] · v_t` over the first `p[r].len()` value rows, for query rows of one
// head, with [`group_values`]' operations for each row (a fused multiply-add per value row,
// in order, from zero). `values` holds the rows `hd` apart.
multiversion!(rows_values, (p: &[&[f32]], values: &[f32], hd: usize, out: &mut [&mut [f32]]), {
    let mut rest = 0;
    if hd.is_multiple_of(32) {
        for (p, o) in p.chunks_exact(VALUE_ROWS).zip(out.chunks_exact_mut(VALUE_ROWS)) {
            let o: [&mut [f32]; VALUE_ROWS] = std::array::from_fn(|r| std::mem::take(&mut o[r]));
            rows_values_of::<VALUE_ROWS>(std::array::from_fn(|r| p[r]), values, hd, o);
        }
        rest = p.len() / VALUE_ROWS * VALUE_ROWS;
    }
    for (p, o) in p.iter().zip(out.iter_mut()).skip(rest) {
        group_values(p, &values[..p.len() * hd], hd, o);
    }
});

/// Up to this many query rows, attention runs row by row as decode does (see [`attention`];
/// longer passes give each row the same bits through the prefill kernels).
pub const EXACT_ROWS: usize = 16;

/// Causal grouped-query attention of `n` new tokens at positions `pos..pos + n`.
/// `q`, `k`, `v` are the projections `(n, heads·head_dim)`, `(n, kv_heads·head_dim)` before
/// bias; the new keys and values are written into `kv` (which must hold `pos + n` positions).
/// Returns the attention output `(n, heads·head_dim)`, heads side by side.
pub(crate) fn attention(
    p: &AttnParams,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    kv: &mut HostKv,
    pos: usize,
    n: usize,
) -> Result<Vec<f32>> {
    let (h, kvh, hd) = (p.heads, p.kv_heads, p.head_dim);
    let half = hd / 2;
    let Some(total) = pos.checked_add(n) else {
        bail!("attention: position {pos} + {n} overflows")
    };
    if h == 0 || kvh == 0 || !h.is_multiple_of(kvh) || hd == 0 || !hd.is_multiple_of(2) {
        bail!("attention: {h} heads in groups of {kvh} key/value heads of {hd} values");
    }
    if (kv.kv_heads, kv.head_dim) != (kvh, hd) {
        bail!(
            "attention: a KV cache of {} heads of {} for {kvh} heads of {hd}",
            kv.kv_heads,
            kv.head_dim
        );
    }
    if q.len() != n * h * hd || k.len() != n * kvh * hd || v.len() != n * kvh * hd {
        bail!("attention: projections do not match {n} tokens of {h}/{kvh} heads of {hd}");
    }
    let extra_ok = |x: Option<&[f32]>, len| x.is_none_or(|x| x.len() == len);
    if !extra_ok(p.q_bias, h * hd)
        || !extra_ok(p.k_bias, kvh * hd)
        || !extra_ok(p.v_bias, kvh * hd)
        || !extra_ok(p.q_norm, hd)
        || !extra_ok(p.k_norm, hd)
    {
        bail!("attention: a bias or norm weight does not match {h}/{kvh} heads of {hd}");
    }
    if kv.cap < total || p.cos.len() < total * half || p.sin.len() < total * half {
        bail!(
            "attention: KV capacity {} or rotary table too small for {total}",
            kv.cap
        );
    }
    // From here on `kv.k` and `kv.v` hold kvh × cap × hd values (HostKv's invariant) and
    // every position written or read is below `total` ≤ cap.
    let cap = kv.cap;
    // Queries, then keys and values into the cache: bias, norm, rope per row.
    let mut qr = q.to_vec();
    {
        let (qd, kd, vd) = (
            SharedMut(qr.as_mut_ptr()),
            SharedMut(kv.k.as_mut_ptr()),
            SharedMut(kv.v.as_mut_ptr()),
        );
        par_ranges(n, (h + 2 * kvh) * hd, |range| {
            for i in range {
                let t = pos + i;
                let cs = (
                    &p.cos[t * half..(t + 1) * half],
                    &p.sin[t * half..(t + 1) * half],
                );
                for head in 0..h {
                    // SAFETY: row i (i < n) of the n × h·hd query copy belongs to this unit.
                    let x = unsafe { qd.slice((i * h + head) * hd, hd) };
                    let b = p.q_bias.map(|b| &b[head * hd..(head + 1) * hd]);
                    finish_head(x, b, p.q_norm, p.eps, cs);
                }
                for g in 0..kvh {
                    let at = (g * cap + t) * hd;
                    // SAFETY: t < total ≤ cap, so position t of head g lies in the buffers;
                    // it belongs to this unit's row i only.
                    let (kx, vx) = unsafe { (kd.slice(at, hd), vd.slice(at, hd)) };
                    kx.copy_from_slice(&k[(i * kvh + g) * hd..(i * kvh + g + 1) * hd]);
                    let b = p.k_bias.map(|b| &b[g * hd..(g + 1) * hd]);
                    finish_head(kx, b, p.k_norm, p.eps, cs);
                    vx.copy_from_slice(&v[(i * kvh + g) * hd..(i * kvh + g + 1) * hd]);
                    if let Some(b) = p.v_bias {
                        for (x, b) in vx.iter_mut().zip(&b[g * hd..(g + 1) * hd]) {
                            *x += b;
                        }
                    }
                }
            }
        });
    }
    let mut out = vec![0f32; n * h * hd];
    let (keys, values) = (&kv.k, &kv.v);
    let groups = h / kvh;
    let scale = 1.0 / (hd as f32).sqrt();
    let dst = SharedMut(out.as_mut_ptr());
    let qr = &qr;
    if n <= EXACT_ROWS || !hd.is_multiple_of(32) {
        // Decode, and a few rows (drafted tokens being verified) one by one as decode computes
        // each, so their outputs match decode's bit for bit. One unit = one row's query heads
        // of one KV group: each cached key and value row is read once for all of them.
        par_ranges(n * kvh, groups * (pos + n) * hd / 2, |range| {
            let mut scores = Vec::new();
            for unit in range {
                let (i, g) = (unit / kvh, unit % kvh);
                let len = pos + i + 1;
                let at = (i * h + g * groups) * hd;
                let span = groups * hd;
                scores.clear();
                scores.resize(groups * len, 0f32);
                let (kbase, vbase) = (&keys[g * cap * hd..], &values[g * cap * hd..]);
                group_scores(
                    &qr[at..at + span],
                    &kbase[..len * hd],
                    hd,
                    scale,
                    &mut scores,
                );
                for row in scores.chunks_mut(len) {
                    softmax_row(row);
                }
                // SAFETY: row i's heads of group g in `out` (n × h·hd) belong to this unit only.
                let o = unsafe { dst.slice(at, span) };
                group_values(&scores, &vbase[..len * hd], hd, o);
            }
        });
        return Ok(out);
    }
    // Prefill: one unit = one query head over a block of query rows, the heads of a KV group
    // neighbours so their shared keys stay in cache. Each row's scores, softmax and weighted
    // values take exactly the operations decode takes for that row (see `tile_scores` and
    // `rows_values`), so a prompt gives the same bits however it is split into passes: a
    // prefix reused from another prompt, or a draft verified, continues as if computed here.
    let block = QUERY_BLOCK;
    let blocks = n.div_ceil(block);
    let tiles = key_tiles(keys, cap, kvh, hd, total);
    let tile_len = total.div_ceil(KEY_TILE) * KEY_TILE;
    #[cfg(target_arch = "x86_64")]
    let wide = crate::embed::kernels::vector_isa() == crate::embed::kernels::VectorIsa::Avx512;
    par_ranges(h * blocks, block * total * hd / 4, |range| {
        let mut scores = Vec::new();
        for unit in range {
            let (head, blk) = (unit / blocks, unit % blocks);
            let g = head / groups;
            let i0 = blk * block;
            let rows = block.min(n - i0);
            // Row r attends to the `pos + i0 + r + 1` positions up to its own.
            let valid = |r: usize| pos + i0 + r + 1;
            let len = valid(rows - 1).div_ceil(KEY_TILE) * KEY_TILE;
            scores.clear();
            scores.resize(rows * len, 0f32);
            let kt = &tiles[g * tile_len * hd..][..len * hd];
            let upto = |r: usize| valid(r).div_ceil(KEY_TILE) * KEY_TILE;
            let qat = |r: usize| ((i0 + r) * h + head) * hd;
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            if wide {
                while done + 4 <= rows {
                    // SAFETY: AVX-512 was detected; rows done..done + 4 of this head start
                    // h·hd apart inside `qr` with hd values each (hd a multiple of 32); the
                    // tiles up to the last row's length lie inside `kt`; and `scores` holds
                    // those rows' scores `len` apart, each row's tiles inside its row.
                    unsafe {
                        x86::tile_scores4(
                            qr.as_ptr().add(qat(done)),
                            h * hd,
                            kt.as_ptr(),
                            upto(done + 3) / KEY_TILE,
                            hd,
                            scale,
                            scores.as_mut_ptr().add(done * len),
                            len,
                        )
                    };
                    done += 4;
                }
            }
            for r in done..rows {
                let (at, upto) = (qat(r), upto(r));
                tile_scores(
                    &qr[at..at + hd],
                    &kt[..upto * hd],
                    hd,
                    scale,
                    &mut scores[r * len..r * len + upto],
                );
            }
            for r in 0..rows {
                softmax_row(&mut scores[r * len..r * len + valid(r)]);
            }
            let vbase = &values[g * cap * hd..][..total * hd];
            let mut done = 0;
            #[cfg(target_arch = "x86_64")]
            if wide {
                while done + 8 <= rows {
                    // SAFETY: AVX-512 was detected; the 8 rows' probabilities lie `len` apart
                    // in `scores`, each up to its valid length ≤ total; `vbase` holds `total`
                    // value rows of hd (a multiple of 32); and the rows' outputs in `out`
                    // (hd each, h·hd apart) are this unit's only.
                    unsafe {
                        x86::rows_values8(
                            scores.as_ptr().add(done * len),
                            len,
                            std::array::from_fn(|r| valid(done + r)),
                            vbase.as_ptr(),
                            hd,
                            dst.at(qat(done)),
                            h * hd,
                        )
                    };
                    done += 8;
                }
            }
            let probs: Vec<&[f32]> = (done..rows)
                .map(|r| &scores[r * len..r * len + valid(r)])
                .collect();
            // SAFETY: this unit's rows i0.. of head `head` in `out` (n × h·hd) are written by
            // no other unit; each row's `hd` values lie inside `out`.
            let mut outs: Vec<&mut [f32]> = (done..rows)
                .map(|r| unsafe { dst.slice(qat(r), hd) })
                .collect();
            rows_values(&probs, vbase, hd, &mut outs);
        }
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Straightforward attention over explicit (already roped) keys for the comparison.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        keys: &[Vec<f32>],
        vals: &[Vec<f32>],
        h: usize,
        kvh: usize,
        hd: usize,
        pos: usize,
        n: usize,
    ) -> Vec<f32> {
        let mut out = vec![0f32; n * h * hd];
        for i in 0..n {
            for head in 0..h {
                let g = head / (h / kvh);
                let qv = &q[(i * h + head) * hd..][..hd];
                let len = pos + i + 1;
                let s: Vec<f64> = (0..len)
                    .map(|t| {
                        let kv = &keys[t][g * hd..][..hd];
                        qv.iter().zip(kv).map(|(a, b)| (a * b) as f64).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for d in 0..hd {
                    let y: f64 = (0..len)
                        .map(|t| e[t] / z * vals[t][g * hd + d] as f64)
                        .sum();
                    out[(i * h + head) * hd + d] = y as f32;
                }
            }
        }
        out
    }

    fn rope_row(x: &mut [f32], t: usize, hd: usize, theta: f32) {
        let half = hd / 2;
        for j in 0..half {
            let a = t as f32 / theta.powf(2.0 * j as f32 / hd as f32);
            let (c, s) = (a.cos(), a.sin());
            let (x1, x2) = (x[j], x[j + half]);
            x[j] = x1 * c - x2 * s;
            x[j + half] = x1 * s + x2 * c;
        }
    }

    #[test]
    fn attention_matches_a_direct_computation() {
        crate::embed::kernels::assert_dispatch_follows_env();
        // Head sizes and groups that take the generic loops and the register-blocked ones.
        for (h, kvh, hd) in [(6, 2, 16), (12, 2, 32), (9, 1, 32), (4, 4, 24)] {
            check_attention(h, kvh, hd);
        }
    }

    fn check_attention(h: usize, kvh: usize, hd: usize) {
        let half = hd / 2;
        let theta = 10_000f32;
        let mut seed = 7u64;
        let mut rnd = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5
        };
        let positions = 120;
        let (mut cos, mut sin) = (Vec::new(), Vec::new());
        for t in 0..positions {
            for j in 0..half {
                let a = t as f32 / theta.powf(2.0 * j as f32 / hd as f32);
                cos.push(a.cos());
                sin.push(a.sin());
            }
        }
        let bias: Vec<f32> = (0..h * hd).map(|_| rnd()).collect();
        let kbias: Vec<f32> = (0..kvh * hd).map(|_| rnd()).collect();
        let vbias: Vec<f32> = (0..kvh * hd).map(|_| rnd()).collect();
        let p = AttnParams {
            heads: h,
            kv_heads: kvh,
            head_dim: hd,
            eps: 1e-6,
            q_bias: Some(&bias),
            k_bias: Some(&kbias),
            v_bias: Some(&vbias),
            q_norm: None,
            k_norm: None,
            cos: &cos,
            sin: &sin,
        };
        let mut kv = HostKv::new(kvh, hd);
        let (mut keys, mut vals) = (Vec::new(), Vec::new());
        // A prefill of 70 tokens (three query blocks), then two single-token steps.
        let mut pos = 0;
        for n in [70usize, 1, 1] {
            kv.resize(pos + n + 3, pos).unwrap();
            let q: Vec<f32> = (0..n * h * hd).map(|_| 2.0 * rnd()).collect();
            let k: Vec<f32> = (0..n * kvh * hd).map(|_| 2.0 * rnd()).collect();
            let v: Vec<f32> = (0..n * kvh * hd).map(|_| rnd()).collect();
            let got = attention(&p, &q, &k, &v, &mut kv, pos, n).unwrap();
            let mut qr = q.clone();
            for i in 0..n {
                for head in 0..h {
                    let x = &mut qr[(i * h + head) * hd..][..hd];
                    for (x, b) in x.iter_mut().zip(&bias[head * hd..]) {
                        *x += b;
                    }
                    rope_row(x, pos + i, hd, theta);
                }
                let mut kr = k[i * kvh * hd..(i + 1) * kvh * hd].to_vec();
                let mut vr = v[i * kvh * hd..(i + 1) * kvh * hd].to_vec();
                for g in 0..kvh {
                    let x = &mut kr[g * hd..(g + 1) * hd];
                    for (x, b) in x.iter_mut().zip(&kbias[g * hd..]) {
                        *x += b;
                    }
                    rope_row(x, pos + i, hd, theta);
                }
                for (x, b) in vr.iter_mut().zip(&vbias) {
                    *x += b;
                }
                keys.push(kr);
                vals.push(vr);
            }
            let want = reference(&qr, &keys, &vals, h, kvh, hd, pos, n);
            let diff = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                diff < 1e-4,
                "{h}/{kvh}×{hd}, n={n} pos={pos}: max diff {diff}"
            );
            pos += n;
        }
    }

    #[test]
    fn a_prompt_gives_the_same_bits_however_it_is_split_into_passes() {
        crate::embed::kernels::assert_dispatch_follows_env();
        // Head sizes that take the prefill blocks (multiples of 32) and the per-row path.
        for (h, kvh, hd) in [(4, 2, 32), (12, 2, 64), (6, 2, 16)] {
            let total = 90;
            let cs: (Vec<f32>, Vec<f32>) = (0..total * hd / 2)
                .map(|i| ((i as f32 * 0.37).cos(), (i as f32 * 0.37).sin()))
                .unzip();
            let p = params(h, kvh, hd, &cs);
            let val = |i: usize| ((i * 7919 % 1013) as f32 / 1013.0) - 0.5;
            let q: Vec<f32> = (0..total * h * hd).map(val).collect();
            let k: Vec<f32> = (0..total * kvh * hd).map(|i| val(i + 1)).collect();
            let v: Vec<f32> = (0..total * kvh * hd).map(|i| val(i + 2)).collect();
            let rows = |x: &[f32], w: usize, a: usize, b: usize| x[a * w..b * w].to_vec();
            let run = |steps: &[usize]| {
                assert_eq!(steps.iter().sum::<usize>(), total);
                let mut kv = HostKv::new(kvh, hd);
                kv.resize(total, 0).unwrap();
                let mut out = Vec::new();
                let mut at = 0;
                for &m in steps {
                    let y = attention(
                        &p,
                        &rows(&q, h * hd, at, at + m),
                        &rows(&k, kvh * hd, at, at + m),
                        &rows(&v, kvh * hd, at, at + m),
                        &mut kv,
                        at,
                        m,
                    )
                    .unwrap();
                    out.extend(y);
                    at += m;
                }
                out
            };
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            // Decode: every row alone. Then a whole prefill, prefills continued from a
            // prefix (at a block edge and inside one), a draft verified after a prefill.
            let one_by_one = bits(&run(&[1; 90]));
            for steps in [
                vec![90],
                vec![32, 58],
                vec![45, 45],
                vec![17, 1, 72],
                vec![70, EXACT_ROWS, 4],
                vec![3, 40, 1, 1, 45],
            ] {
                assert!(
                    bits(&run(&steps)) == one_by_one,
                    "{h}/{kvh}×{hd}: passes {steps:?} differ from one row at a time"
                );
            }
        }
    }

    /// Parameters for `h`/`kvh` heads of `hd` over the rotary tables `cs` (their values do not
    /// matter here).
    fn params<'a>(h: usize, kvh: usize, hd: usize, cs: &'a (Vec<f32>, Vec<f32>)) -> AttnParams<'a> {
        AttnParams {
            heads: h,
            kv_heads: kvh,
            head_dim: hd,
            eps: 1e-6,
            q_bias: None,
            k_bias: None,
            v_bias: None,
            q_norm: None,
            k_norm: None,
            cos: &cs.0,
            sin: &cs.1,
        }
    }

    #[test]
    fn the_kv_cache_cannot_be_overrun() {
        let (h, kvh, hd) = (4, 2, 16);
        let cs = (vec![1f32; 1024 * hd / 2], vec![0f32; 1024 * hd / 2]);
        let run = |p: &AttnParams, kv: &mut HostKv, pos: usize, n: usize| {
            let q = vec![1f32; n * p.heads * p.head_dim];
            let k = vec![1f32; n * p.kv_heads * p.head_dim];
            attention(p, &q, &k, &k, kv, pos, n)
        };
        let p = params(h, kvh, hd, &cs);
        // The buffers always hold kv_heads × cap × head_dim values.
        let mut kv = HostKv::new(kvh, hd);
        assert_eq!((kv.cap(), kv.bytes()), (0, 0));
        kv.resize(40, 0).unwrap();
        assert_eq!((kv.cap(), kv.bytes()), (40, 2 * 2 * 40 * 16 * 4));
        assert!(run(&p, &mut kv, 0, 40).is_ok());
        // Writing past the capacity is an error, not a write out of bounds.
        let e = run(&p, &mut kv, 39, 2).unwrap_err().to_string();
        assert!(e.contains("KV capacity 40"), "{e}");
        let e = run(&p, &mut kv, usize::MAX, 2).unwrap_err().to_string();
        assert!(e.contains("overflows"), "{e}");
        // A cache made for one head layout cannot be used with another (the old public fields
        // let a cache of one KV head's buffers into 2-head attention: heap corruption).
        let mut small = HostKv::new(1, hd);
        small.resize(1000, 0).unwrap();
        let e = run(&p, &mut small, 0, 900).unwrap_err().to_string();
        assert!(e.contains("a KV cache of 1 heads of 16"), "{e}");
        let mut other = HostKv::new(kvh, 8);
        other.resize(1000, 0).unwrap();
        assert!(run(&p, &mut other, 0, 10).is_err());
        // Shrinking keeps the invariant and the first positions.
        kv.resize(8, 8).unwrap();
        assert_eq!((kv.cap(), kv.bytes()), (8, 2 * 2 * 8 * 16 * 4));
        assert!(run(&p, &mut kv, 8, 1).is_err());
        assert!(run(&p, &mut kv, 7, 1).is_ok());
        // An impossible size is an error, not a wrapped length.
        assert!(kv.resize(usize::MAX / 4, 0).is_err());
        assert_eq!(kv.cap(), 8);
        // Head layouts the kernel cannot run, and extras of the wrong length.
        let mut kv = HostKv::new(0, hd);
        assert!(run(&params(h, 0, hd, &cs), &mut kv, 0, 1).is_err());
        let mut kv = HostKv::new(3, hd);
        kv.resize(4, 0).unwrap();
        assert!(run(&params(h, 3, hd, &cs), &mut kv, 0, 1).is_err());
        let mut kv = HostKv::new(kvh, 15);
        kv.resize(4, 0).unwrap();
        assert!(run(&params(h, kvh, 15, &cs), &mut kv, 0, 1).is_err());
        let mut kv = HostKv::new(kvh, hd);
        kv.resize(4, 0).unwrap();
        let short = vec![0f32; hd - 1];
        let mut p = params(h, kvh, hd, &cs);
        p.k_norm = Some(&short);
        let e = run(&p, &mut kv, 0, 1).unwrap_err().to_string();
        assert!(e.contains("bias or norm"), "{e}");
    }

    #[test]
    fn rms_norm_and_silu_mul_match_candle() {
        crate::embed::kernels::assert_dispatch_follows_env();
        let dev = candle_core::Device::Cpu;
        let x = Tensor::randn(0f32, 1.0, (3, 700, 64), &dev).unwrap();
        let w = Tensor::randn(0f32, 1.0, 64, &dev).unwrap();
        let ours = rms_norm(&x, &w, 1e-6).unwrap();
        let theirs = candle_nn::ops::rms_norm(&x, &w, 1e-6).unwrap();
        let d = (ours - theirs).unwrap().abs().unwrap().max_all().unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-5);
        let g = Tensor::randn(0f32, 3.0, (5, 9000), &dev).unwrap();
        let u = Tensor::randn(0f32, 1.0, (5, 9000), &dev).unwrap();
        let ours = silu_mul(&g, &u).unwrap();
        let theirs = (candle_nn::ops::silu(&g).unwrap() * &u).unwrap();
        let d = (ours - theirs).unwrap().abs().unwrap().max_all().unwrap();
        assert!(d.to_scalar::<f32>().unwrap() < 1e-5);
    }
}
