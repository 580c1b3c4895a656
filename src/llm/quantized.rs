//! Quantized matrix products for the CPU decoder (runtime-detected: AVX-512 VNNI, else AVX2
//! with FMA and F16C in [`avx2`]; elsewhere, or with `REPOHOP_PORTABLE_KERNELS=1`, candle's
//! kernels run, and `REPOHOP_AVX2_KERNELS=1` picks the AVX2 ones on an AVX-512 machine).
//!
//! Decode reads every weight once per token, so its speed is bytes moved. candle repacks Q4_K
//! into 16-row tiles with f32 scales (3,072 bytes per 16×256 weights, a third more than the
//! GGUF's 2,304); [`Q4KTiles`] keeps the same interleaving with the GGUF's own 6-bit scales
//! widened to bytes (2,368 bytes) and serves prefill too, so candle's copy is never built.
//! Q6_K (`ffn_down`/`attn_v` in half the layers, and the output head) is repacked the same
//! way for the AVX-512 kernels ([`Q6KTiles`]); the AVX2 ones multiply it straight from its GGUF
//! blocks ([`Q6KRows`]) for passes of a few tokens, and candle's tiles take longer ones there.
//!
//! Activations are quantized to 8 bits per 256-value block ([`Q8Rows`], as llama.cpp's Q8_K),
//! once per input shared by every weight that reads it.

use std::ops::Range;
use std::sync::OnceLock;

use candle_core::quantized::{GgmlDType, QTensor};

use super::kernels::SharedMut;

/// `$f::<R>(args)` with R = `$rows` (1 ..= 4, or 1 ..= 8 after `8;`) as a constant: the
/// kernels are monomorphised per activation-row count so their per-row registers stay
/// registers (AVX2's 16 registers hold 4 rows' sums, AVX-512's 32 hold 8).
macro_rules! by_rows {
    ($rows:expr, $f:ident($($arg:expr),*)) => {
        match $rows {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            _ => $f::<4>($($arg),*),
        }
    };
    (8; $rows:expr, $f:ident($($arg:expr),*)) => {
        match $rows {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            6 => $f::<6>($($arg),*),
            7 => $f::<7>($($arg),*),
            _ => $f::<8>($($arg),*),
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2;
mod q6k_tiles;

pub(crate) use q6k_tiles::Q6KTiles;

/// Values per quantization block (Q4_K, Q6_K and the activations' blocks).
const QK: usize = 256;
/// Weight rows per tile: one AVX-512 register of f32 outputs.
const TILE_ROWS: usize = 16;
/// Activation rows a weight block is unpacked for and multiplied with at once, by the AVX2
/// and AVX-512 kernels (register blocking: more rows share one unpacking).
const AVX2_ROWS: usize = 4;
const AVX512_ROWS: usize = 8;
/// Most activation rows our Q6_K kernel takes (passes of a few tokens); candle multiplies more.
pub(crate) const Q6K_MAX_ROWS: usize = 16;
/// GGUF block sizes in bytes.
const Q4K_BLOCK: usize = 144;
const Q6K_BLOCK: usize = 210;
/// How far ahead of the weights being multiplied the kernels prefetch, in bytes.
const Q4K_AHEAD: usize = 4 * std::mem::size_of::<Q4KTile>();
const Q6K_AHEAD: usize = 4096;
/// The AVX-512 kernels prefetch the weights into L2, not L1: with `_MM_HINT_T0` the stream
/// held the L1's miss buffers and the activation loads of several rows waited behind it, so a
/// pass over four rows cost the weights' time plus the arithmetic's; into L2 the two overlap
/// (`bench llm --concurrency 4,8`, 2 cores, medians of three rounds: 4 at once 71.5 → 92.4
/// tok/s, 8 at once 106.4 → 121.4, one at a time unchanged). The AVX2 kernels keep T0: they
/// read each tile twice (one half of its columns at a time) and measured slower from L2.
#[cfg(target_arch = "x86_64")]
const WEIGHT_HINT: i32 = core::arch::x86_64::_MM_HINT_T1;

/// Which of our kernel sets a CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QuantIsa {
    /// AVX-512 F/BW/VNNI (with AVX2, FMA and F16C).
    Avx512Vnni,
    /// AVX2, FMA and F16C.
    Avx2,
}

/// The widest kernel set this CPU has every feature of (those the kernels enable and those
/// they imply), whatever the environment says.
pub(crate) fn detected() -> Option<QuantIsa> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx2") && has!("fma") && has!("f16c")) {
            return None;
        }
        if has!("avx512f") && has!("avx512bw") && has!("avx512vnni") {
            return Some(QuantIsa::Avx512Vnni);
        }
        Some(QuantIsa::Avx2)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// The kernel set that runs: [`detected`], narrowed by `REPOHOP_PORTABLE_KERNELS=1` (none) or
/// `REPOHOP_AVX2_KERNELS=1` (AVX2 on an AVX-512 machine). Decided once per process, so weights
/// packed for it stay usable.
pub(crate) fn isa() -> Option<QuantIsa> {
    static ISA: OnceLock<Option<QuantIsa>> = OnceLock::new();
    *ISA.get_or_init(|| {
        if crate::embed::kernels::portable_forced() {
            return None;
        }
        match detected() {
            Some(QuantIsa::Avx512Vnni) if crate::embed::kernels::avx2_forced() => {
                Some(QuantIsa::Avx2)
            }
            other => other,
        }
    })
}

/// Whether Q6_K weights are repacked into [`Q6KTiles`] (the AVX-512 kernels); the AVX2 ones
/// read the GGUF's blocks ([`Q6KRows`]).
pub(crate) fn q6k_tiled() -> bool {
    isa() == Some(QuantIsa::Avx512Vnni)
}

/// Whether our kernels run at all (see [`isa`]).
pub(crate) fn available() -> bool {
    isa().is_some()
}

/// The entry points of one kernel set.
#[derive(Clone, Copy)]
struct Kernels {
    /// Most activation rows per kernel call.
    rows: usize,
    quantize: unsafe fn(&[f32; QK], &mut Q8Block),
    q4k: TileUnit<Q4KTiles>,
    q6k: unsafe fn(&Q6KRows<'_>, &Q8Rows, Range<usize>, Range<usize>, SharedMut, usize),
    q6k_tiles: Option<TileUnit<Q6KTiles>>,
}

/// A kernel taking one 16-row group of a tiled weight: `(weight, x, rows, group, dst, n)`.
type TileUnit<W> = unsafe fn(&W, &Q8Rows, Range<usize>, usize, SharedMut, usize);

/// The kernels [`isa`] picked. Panics where none runs.
fn kernels() -> Kernels {
    match isa() {
        #[cfg(target_arch = "x86_64")]
        Some(QuantIsa::Avx2) => Kernels {
            rows: AVX2_ROWS,
            quantize: avx2::quantize_block,
            q4k: avx2::q4k_unit,
            q6k: avx2::q6k_unit,
            q6k_tiles: None,
        },
        Some(QuantIsa::Avx512Vnni) => Kernels {
            rows: AVX512_ROWS,
            quantize: x86::quantize_block,
            q4k: x86::q4k_unit,
            q6k: x86::q6k_unit,
            q6k_tiles: Some(q6k_tiles::unit),
        },
        _ => panic!("our quantized kernels need AVX-512 VNNI or AVX2 with FMA and F16C"),
    }
}

/// One 256-value block of one activation row: `x ≈ d × qs`.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Q8Block {
    qs: [i8; QK],
    /// Sums of `qs` over each 16 values (Q6_K's sub-blocks).
    sums16: [i16; QK / 16],
    /// Sums of `qs` over each 32 values (Q4_K's sub-blocks), as f32.
    sums32: [f32; QK / 32],
    /// The same sums as integers (at most 32 × 127 in magnitude).
    sums32i: [i16; QK / 32],
    d: f32,
}

impl Q8Block {
    /// The 32-value sums from the 16-value ones.
    fn fill_sums32(&mut self) {
        for (s, pair) in self.sums16.chunks_exact(2).enumerate() {
            self.sums32i[s] = pair[0] + pair[1];
            self.sums32[s] = self.sums32i[s] as f32;
        }
    }

    const ZERO: Q8Block = Q8Block {
        qs: [0; QK],
        sums16: [0; QK / 16],
        sums32: [0.0; QK / 32],
        sums32i: [0; QK / 32],
        d: 0.0,
    };
}

/// Activation rows quantized block by block.
pub(crate) struct Q8Rows {
    blocks: Vec<Q8Block>,
    rows: usize,
    /// Blocks per row.
    per_row: usize,
}

impl Q8Rows {
    /// Quantizes `rows` rows of `k` values (`k` a multiple of 256) with the largest magnitude
    /// of each block mapped to ±127. Must only be called when [`available`] is true.
    pub(crate) fn quantize(x: &[f32], rows: usize, k: usize) -> Self {
        let quantize_block = kernels().quantize;
        assert!(
            k.is_multiple_of(QK) && x.len() == rows * k,
            "activations must be rows × 256·j"
        );
        let per_row = k / QK;
        let (inputs, _) = x.as_chunks::<QK>();
        let mut blocks = vec![Q8Block::ZERO; inputs.len()];
        let ptr = SharedBlocks(blocks.as_mut_ptr());
        let body = |range: Range<usize>| {
            for b in range {
                // SAFETY: `kernels()` picked a set whose features the CPU has; block
                // b < `blocks.len()` is written by this unit only, and nothing reads it meanwhile.
                unsafe { quantize_block(&inputs[b], &mut *ptr.at(b)) };
            }
        };
        let n = blocks.len();
        if rows > 1 {
            candle_core::utils::barrier_pool().execute_chunked(n, body);
        } else {
            body(0..n);
        }
        Self {
            blocks,
            rows,
            per_row,
        }
    }

    fn row(&self, r: usize) -> &[Q8Block] {
        &self.blocks[r * self.per_row..(r + 1) * self.per_row]
    }
}

#[derive(Clone, Copy)]
struct SharedBlocks(*mut Q8Block);
// SAFETY: parallel units write disjoint blocks, and the pool joins before the owner reads.
unsafe impl Send for SharedBlocks {}
// SAFETY: as for `Send`: shared use only ever writes disjoint blocks.
unsafe impl Sync for SharedBlocks {}

impl SharedBlocks {
    fn at(&self, i: usize) -> *mut Q8Block {
        self.0.wrapping_add(i)
    }
}

/// 16 rows × 256 columns of a Q4_K matrix. Row `r` of the tile has value
/// `d[r] × scales[s][r] × q − dmin[r] × mins[s][r]` in sub-block `s` (32 columns).
#[repr(C, align(64))]
struct Q4KTile {
    /// `[group of 8 columns (32)][row (16)][4 bytes]`: byte `j` of a group holds column
    /// `8g + j` in its low nibble and `8g + j + 4` in its high one, so one VNNI instruction
    /// takes 4 columns of 16 rows.
    qs: [u8; QK / 8 * TILE_ROWS * 4],
    scales: [[u8; TILE_ROWS]; 8],
    mins: [[u8; TILE_ROWS]; 8],
    /// f16 bits.
    d: [u16; TILE_ROWS],
    dmin: [u16; TILE_ROWS],
}

/// A Q4_K weight `(n, k)` repacked into tiles, `[row tile][column block]`.
pub(crate) struct Q4KTiles {
    tiles: Vec<Q4KTile>,
    n: usize,
    k: usize,
}

/// The 6-bit scale and min of sub-block `j` from a Q4_K block's 12 packed bytes.
fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// A tensor's shape `(n, k)` and GGUF bytes.
type Tileable<'a> = Option<(usize, usize, std::borrow::Cow<'a, [u8]>)>;

/// The shape and GGUF blocks (`block` bytes each) of a tensor of `dtype` that tiles: `n` a
/// multiple of 16, `k` of 256. `None` for other dtypes and shapes.
fn tileable(t: &QTensor, dtype: GgmlDType, block: usize) -> candle_core::Result<Tileable<'_>> {
    let (n, k) = match t.shape().dims() {
        &[n, k] => (n, k),
        _ => return Ok(None),
    };
    if t.dtype() != dtype || !n.is_multiple_of(TILE_ROWS) || !k.is_multiple_of(QK) || n == 0 {
        return Ok(None);
    }
    let data = t.data()?;
    if data.len() != n * (k / QK) * block {
        candle_core::bail!("{dtype:?} tensor of {n}×{k} holds {} bytes", data.len());
    }
    Ok(Some((n, k, data)))
}

impl Q4KTiles {
    /// Repacks a CPU Q4_K tensor of shape `(n, k)`; `None` for other dtypes or shapes that
    /// don't tile (`n` not a multiple of 16).
    pub(crate) fn pack(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let Some((n, k, data)) = tileable(t, GgmlDType::Q4K, Q4K_BLOCK)? else {
            return Ok(None);
        };
        let per_row = k / QK;
        let mut tiles = Vec::with_capacity(n / TILE_ROWS * per_row);
        for t in 0..n / TILE_ROWS {
            for b in 0..per_row {
                let mut tile = Q4KTile {
                    qs: [0; QK / 8 * TILE_ROWS * 4],
                    scales: [[0; TILE_ROWS]; 8],
                    mins: [[0; TILE_ROWS]; 8],
                    d: [0; TILE_ROWS],
                    dmin: [0; TILE_ROWS],
                };
                for r in 0..TILE_ROWS {
                    let at = ((t * TILE_ROWS + r) * per_row + b) * Q4K_BLOCK;
                    let blk = &data[at..at + Q4K_BLOCK];
                    tile.d[r] = u16::from_le_bytes([blk[0], blk[1]]);
                    tile.dmin[r] = u16::from_le_bytes([blk[2], blk[3]]);
                    for s in 0..8 {
                        (tile.scales[s][r], tile.mins[s][r]) = scale_min(s, &blk[4..16]);
                    }
                    // GGUF: each 32-byte chunk c holds columns 64c.. in its low nibbles and
                    // 64c+32.. in its high ones.
                    let qs = &blk[16..];
                    let col = |i: usize| {
                        let byte = qs[i / 64 * 32 + i % 32];
                        if i % 64 < 32 {
                            byte & 0x0F
                        } else {
                            byte >> 4
                        }
                    };
                    for g in 0..QK / 8 {
                        for j in 0..4 {
                            tile.qs[(g * TILE_ROWS + r) * 4 + j] =
                                col(8 * g + j) | (col(8 * g + j + 4) << 4);
                        }
                    }
                }
                tiles.push(tile);
            }
        }
        Ok(Some(Self { tiles, n, k }))
    }

    pub(crate) fn n(&self) -> usize {
        self.n
    }

    /// The tiles of 16-row group `group`, one per 256-column block.
    fn group(&self, group: usize) -> &[Q4KTile] {
        let per_row = self.k / QK;
        &self.tiles[group * per_row..(group + 1) * per_row]
    }

    pub(crate) fn k(&self) -> usize {
        self.k
    }
}

/// A Q6_K weight `(n, k)` borrowed as GGUF blocks, multiplied one row at a time.
pub(crate) struct Q6KRows<'a> {
    data: &'a [u8],
    n: usize,
    k: usize,
}

impl<'a> Q6KRows<'a> {
    /// Borrows a CPU Q6_K tensor's blocks; `None` for other dtypes.
    pub(crate) fn new(t: &'a QTensor, data: &'a [u8]) -> Option<Self> {
        let (n, k) = match t.shape().dims() {
            &[n, k] => (n, k),
            _ => return None,
        };
        let ok = t.dtype() == GgmlDType::Q6K
            && k.is_multiple_of(QK)
            && data.len() == n * (k / QK) * Q6K_BLOCK;
        ok.then_some(Self { data, n, k })
    }
}

/// One weight of a [`matmul`] call.
pub(crate) enum QWeight<'a> {
    Q4K(&'a Q4KTiles),
    /// At most [`Q6K_MAX_ROWS`] activation rows.
    Q6K(Q6KRows<'a>),
    Q6KTiles(&'a Q6KTiles),
}

impl QWeight<'_> {
    fn n(&self) -> usize {
        match self {
            QWeight::Q4K(w) => w.n,
            QWeight::Q6K(w) => w.n,
            QWeight::Q6KTiles(w) => w.n(),
        }
    }

    fn k(&self) -> usize {
        match self {
            QWeight::Q4K(w) => w.k,
            QWeight::Q6K(w) => w.k,
            QWeight::Q6KTiles(w) => w.k(),
        }
    }

    /// Output rows per parallel unit.
    fn unit_rows(&self) -> usize {
        match self {
            QWeight::Q4K(_) | QWeight::Q6KTiles(_) => TILE_ROWS,
            QWeight::Q6K(_) => 8,
        }
    }
}

/// `outs[i] = x × weights[i]ᵀ` (`x.rows × n_i`, row-major) for weights that all take `x`,
/// in one parallel region. Must only be called when [`available`] is true.
pub(crate) fn matmul(weights: &[QWeight], x: &Q8Rows, outs: &mut [Vec<f32>]) {
    let kernels = kernels();
    assert_eq!(weights.len(), outs.len());
    let k = x.per_row * QK;
    let row_chunks = x.rows.div_ceil(kernels.rows);
    // Unit ranges per weight: its output-row groups × activation-row chunks, the latter
    // innermost so consecutive units reuse one weight tile from cache.
    let mut starts = Vec::with_capacity(weights.len());
    let mut total = 0;
    for (w, out) in weights.iter().zip(outs.iter_mut()) {
        assert_eq!(w.k(), k, "weight and activations disagree on k");
        assert!(
            !matches!(w, QWeight::Q6K(_)) || x.rows <= Q6K_MAX_ROWS,
            "Q6_K runs at most {Q6K_MAX_ROWS} rows"
        );
        out.clear();
        out.resize(x.rows * w.n(), 0.0);
        starts.push(total);
        total += w.n().div_ceil(w.unit_rows()) * row_chunks;
    }
    let dsts: Vec<SharedMut> = outs.iter_mut().map(|o| SharedMut(o.as_mut_ptr())).collect();
    let run = |range: Range<usize>| {
        for unit in range {
            let wi = starts.partition_point(|&s| s <= unit) - 1;
            let local = unit - starts[wi];
            let (group, chunk) = (local / row_chunks, local % row_chunks);
            let r0 = chunk * kernels.rows;
            let rows = r0..(r0 + kernels.rows).min(x.rows);
            let w = &weights[wi];
            let n = w.n();
            let cols = group * w.unit_rows()..((group + 1) * w.unit_rows()).min(n);
            // SAFETY: `kernels()` picked a set whose features the CPU has. Every weight's `k`
            // matches `x` (asserted);
            // tiles have n a multiple of 16 and Q6_K rows n·k/256 blocks (their
            // constructors' invariants); `outs[wi]` was sized `x.rows × n`; and each unit
            // writes only its own (rows, cols) block of it.
            unsafe {
                match w {
                    QWeight::Q4K(t) => (kernels.q4k)(t, x, rows, group, dsts[wi], n),
                    QWeight::Q6K(q) => (kernels.q6k)(q, x, rows, cols, dsts[wi], n),
                    QWeight::Q6KTiles(t) => {
                        let unit = kernels
                            .q6k_tiles
                            .expect("Q6_K tiles are packed only for kernels that take them");
                        unit(t, x, rows, group, dsts[wi], n)
                    }
                }
            }
        }
    };
    if total > 1 {
        candle_core::utils::barrier_pool().execute_chunked(total, run);
    } else {
        run(0..total);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::*;
    use core::arch::x86_64::*;

    /// Tile row group `group` of `w` times activation rows `rows` (at most [`AVX512_ROWS`]).
    ///
    /// # Safety
    /// [`available`] must hold; `w.k` must equal `x`'s row length, `n` must be `w.n`, `rows`
    /// must lie in `0..x.rows` and `group` in `0..n / 16`; `dst` must hold `x.rows × n` values,
    /// of which no one else writes this unit's `rows × 16` block meanwhile.
    pub(super) unsafe fn q4k_unit(
        w: &Q4KTiles,
        x: &Q8Rows,
        rows: Range<usize>,
        group: usize,
        dst: SharedMut,
        n: usize,
    ) {
        let tiles = w.group(group);
        // SAFETY: the caller's contract is `q4k_tiles`'s, with R = rows.len() ≤ AVX512_ROWS.
        unsafe { by_rows!(8; rows.len(), q4k_tiles(tiles, x, rows.start, group, dst, n)) }
    }

    /// One 256-value activation block to [`Q8Block`].
    ///
    /// # Safety
    /// AVX-512 F/BW must be present.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn quantize_block(x: &[f32; QK], out: &mut Q8Block) {
        // SAFETY: 16 values from 16·g, g < 16, lie inside `x`'s 256.
        let load = |g: usize| unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * g)) };
        let mut amax = _mm512_setzero_ps();
        for g in 0..QK / 16 {
            amax = _mm512_max_ps(amax, _mm512_abs_ps(load(g)));
        }
        let amax = _mm512_reduce_max_ps(amax);
        if amax == 0.0 {
            *out = Q8Block::ZERO;
            return;
        }
        let inv = _mm512_set1_ps(127.0 / amax);
        for g in 0..QK / 16 {
            // Round to nearest; |x × inv| ≤ 127, and the narrowing saturates anyway.
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(load(g), inv));
            // SAFETY: bytes 16·g..16·g + 16 of the 256 in `out.qs`.
            unsafe {
                _mm_storeu_si128(
                    out.qs.as_mut_ptr().add(16 * g).cast(),
                    _mm512_cvtsepi32_epi8(q),
                )
            };
            out.sums16[g] = _mm512_reduce_add_epi32(q) as i16;
        }
        out.fill_sums32();
        out.d = amax / 127.0;
    }

    /// The 4 bytes at `p` in every 32-bit lane.
    ///
    /// # Safety
    /// AVX-512 F must be present and `p` must point to 4 readable bytes.
    #[inline(always)]
    pub(super) unsafe fn bcast4(p: *const i8) -> __m512i {
        // SAFETY: the caller's contract.
        unsafe { _mm512_set1_epi32(std::ptr::read_unaligned(p as *const i32)) }
    }

    /// `tiles` (one row group's, one per 256-column block) times activation rows
    /// `r0..r0 + R` into `dst`.
    ///
    /// # Safety
    /// As [`q4k_unit`]: the features present, `tiles.len()` blocks per activation row,
    /// `r0 + R ≤ x.rows`, columns `16·group..16·group + 16` inside `n`, `dst` of `x.rows × n`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn q4k_tiles<const R: usize>(
        tiles: &[Q4KTile],
        x: &Q8Rows,
        r0: usize,
        group: usize,
        dst: SharedMut,
        n: usize,
    ) {
        // SAFETY: the features are present (contract). Weight loads: 64 bytes at
        // (s·4 + g)·64 ≤ 1984 in `tile.qs` (2048 bytes); `d`/`dmin` 32 bytes, scales/mins 16.
        // Activation reads: 4 + 4 bytes at s·32 + g·8 ≤ 248 in `qs` (256), 4 at 4·p ≤ 12 in
        // `sums32i` (16), rows r0..r0+R
        // bounds-checked by `x.row`. Stores: 16 values at row r0 + i, column 16·group, inside
        // `dst` and this unit's own block (contract). Prefetches may point anywhere.
        unsafe {
            let nibble = _mm512_set1_epi8(0x0F);
            let acts: [&[Q8Block]; R] = std::array::from_fn(|i| x.row(r0 + i));
            let mut acc = [_mm512_setzero_ps(); R];
            for (b, tile) in tiles.iter().enumerate() {
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile.d.as_ptr().cast()));
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(tile.dmin.as_ptr().cast()));
                // The mins' term first, exact in integers: Σ_s min_s × (sum of the
                // sub-block's activations), two sub-blocks per `dpwssd` (mins as i16 pairs).
                let min_pairs: [__m512i; 4] = std::array::from_fn(|p| {
                    let widen = |s: usize| {
                        _mm512_cvtepu8_epi32(_mm_loadu_si128(tile.mins[s].as_ptr().cast()))
                    };
                    _mm512_or_si512(widen(2 * p), _mm512_slli_epi32(widen(2 * p + 1), 16))
                });
                let mut sum: [__m512; R] = std::array::from_fn(|i| {
                    let sums = acts[i][b].sums32i.as_ptr().cast::<i8>();
                    let mut m = _mm512_setzero_si512();
                    for (p, pair) in min_pairs.iter().enumerate() {
                        m = _mm512_dpwssd_epi32(m, *pair, bcast4(sums.add(4 * p)));
                    }
                    _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(m), _mm512_setzero_ps())
                });
                // Columns 8g..8g + 8 of sub-block s, for every row, into `dots`.
                let dot_step = |s: usize, g: usize, dots: &mut [__m512i; R]| {
                    let w = _mm512_loadu_si512(tile.qs.as_ptr().add((s * 4 + g) * 64).cast());
                    let lo = _mm512_and_si512(w, nibble);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), nibble);
                    for (dot, act) in dots.iter_mut().zip(&acts) {
                        let q = act[b].qs.as_ptr().add(s * 32 + g * 8);
                        *dot = _mm512_dpbusd_epi32(*dot, lo, bcast4(q));
                        *dot = _mm512_dpbusd_epi32(*dot, hi, bcast4(q.add(4)));
                    }
                };
                // Sub-block s's dot products, scaled, into every row's sum (in order of s, so
                // a row's sum is the same however many rows share the pass).
                let scaled = |s: usize, dots: &[__m512i; R], sum: &mut [__m512; R]| {
                    let scales = _mm_loadu_si128(tile.scales[s].as_ptr().cast());
                    let scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(scales)));
                    for (acc, dot) in sum.iter_mut().zip(dots) {
                        *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*dot), scale, *acc);
                    }
                };
                // The prefetches over the steps cover the 37 lines of a tile `Q4K_AHEAD` on.
                let ahead = (tile as *const Q4KTile)
                    .cast::<i8>()
                    .wrapping_add(Q4K_AHEAD);
                if R <= 4 {
                    // Sub-blocks in pairs: two independent dot-product chains per row.
                    for pair in 0..4 {
                        let (sa, sb) = (2 * pair, 2 * pair + 1);
                        let mut ia = [_mm512_setzero_si512(); R];
                        let mut ib = [_mm512_setzero_si512(); R];
                        for g in 0..4 {
                            for j in 0..3 {
                                let line = ((pair * 4 + g) * 3 + j) * 64;
                                _mm_prefetch::<WEIGHT_HINT>(ahead.wrapping_add(line));
                            }
                            dot_step(sa, g, &mut ia);
                            dot_step(sb, g, &mut ib);
                        }
                        scaled(sa, &ia, &mut sum);
                        scaled(sb, &ib, &mut sum);
                    }
                } else {
                    // Five rows or more are enough independent chains, and their registers
                    // leave no room for a second sub-block's.
                    for s in 0..8 {
                        let mut dots = [_mm512_setzero_si512(); R];
                        for g in 0..4 {
                            for j in 0..2 {
                                let line = ((s * 4 + g) * 2 + j) * 64;
                                _mm_prefetch::<WEIGHT_HINT>(ahead.wrapping_add(line));
                            }
                            dot_step(s, g, &mut dots);
                        }
                        scaled(s, &dots, &mut sum);
                    }
                }
                for i in 0..R {
                    acc[i] = _mm512_fmadd_ps(sum[i], _mm512_set1_ps(acts[i][b].d), acc[i]);
                }
            }
            for (i, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(dst.at((r0 + i) * n + group * TILE_ROWS), *a);
            }
        }
    }

    /// Output columns `cols` of activation rows `rows` (at most [`AVX512_ROWS`]) times a Q6_K
    /// weight: each weight block is unpacked once for all the rows.
    ///
    /// # Safety
    /// [`available`] must hold; `w.k` must equal `x`'s row length, `rows` lie in `0..x.rows`,
    /// `cols` in `0..w.n` = `n`, and `dst` hold `x.rows × n` values, of which no one else
    /// writes this unit's `rows × cols` block meanwhile.
    pub(super) unsafe fn q6k_unit(
        w: &Q6KRows,
        x: &Q8Rows,
        rows: Range<usize>,
        cols: Range<usize>,
        dst: SharedMut,
        n: usize,
    ) {
        // SAFETY: the caller's contract is `q6k_rows`'s, with R = rows.len() ≤ AVX512_ROWS.
        unsafe { by_rows!(8; rows.len(), q6k_rows(w, x, rows.start, cols, dst, n)) }
    }

    /// Columns `cols` of activation rows `r0..r0 + R` times a Q6_K weight. Each row's
    /// arithmetic is the same whatever R is, so several rows at once give each row's
    /// single-row result bit for bit.
    ///
    /// # Safety
    /// As [`q6k_unit`], with `r0 + R ≤ x.rows`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
    unsafe fn q6k_rows<const R: usize>(
        w: &Q6KRows,
        x: &Q8Rows,
        r0: usize,
        cols: Range<usize>,
        dst: SharedMut,
        n: usize,
    ) {
        // SAFETY: the features are present (contract). `row` is a bounds-checked slice of
        // `per_row` blocks and each activation row holds `per_row` blocks (`Q8Rows::row`), so
        // block b's 210 bytes (ql 0..128, qh 128..192, scales 192..208, d 208..210) and `a.qs`
        // (256 bytes, read in 64-byte halves), `a.sums16` (32 bytes) are in bounds;
        // `dst.at((r0 + r) * n + c)` with r < R, c < n lies in `dst`. Prefetches may point
        // anywhere: they never fault.
        unsafe {
            let per_row = w.k / QK;
            let acts: [&[Q8Block]; R] = std::array::from_fn(|r| x.row(r0 + r));
            let low4 = _mm512_set1_epi8(0x0F);
            let high2 = _mm512_set1_epi8(0x30);
            // Per 16-bit lane shifts that bring the 2 high bits of a value to bits 4-5: the first
            // 32 bytes of a half take qh bits 0-1 (low nibbles) / 4-5 (high nibbles), the next 32
            // bits 2-3 / 6-7.
            let shift_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
            let shift_hi = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
            // Lane i of a dot product covers values 4i..4i+3 of its 64: sub-block i/4.
            let sub_of = |base: i32| {
                _mm512_setr_epi32(
                    base,
                    base,
                    base,
                    base,
                    base + 1,
                    base + 1,
                    base + 1,
                    base + 1,
                    base + 2,
                    base + 2,
                    base + 2,
                    base + 2,
                    base + 3,
                    base + 3,
                    base + 3,
                    base + 3,
                )
            };
            let subs = [sub_of(0), sub_of(4), sub_of(8), sub_of(12)];
            let low16 = _mm512_set1_epi32(0xFFFF);
            for c in cols {
                let row = &w.data[c * per_row * Q6K_BLOCK..(c + 1) * per_row * Q6K_BLOCK];
                let mut acc = [_mm512_setzero_ps(); R];
                for b in 0..per_row {
                    let blk = row.as_ptr().add(b * Q6K_BLOCK);
                    for j in 0..4 {
                        _mm_prefetch::<WEIGHT_HINT>(blk.wrapping_add(Q6K_AHEAD + 64 * j).cast());
                    }
                    let (ql, qh, sc) = (blk, blk.add(128), blk.add(192));
                    let d_bits = u16::from_le_bytes([*blk.add(208), *blk.add(209)]);
                    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d_bits as i32)));
                    // Each scale in the low 16 bits of its lane, zeros above, for `dpwssd`.
                    let scales =
                        _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_loadu_si128(sc.cast())), low16);
                    let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.cast()));
                    // The block's 6-bit values (+32), as the low and high nibble halves of its two
                    // 128-value halves, and each product lane's sub-block scale.
                    let mut vals = [_mm512_setzero_si512(); 4];
                    let mut lane_scales = [_mm512_setzero_si512(); 4];
                    for half in 0..2 {
                        let l = _mm512_loadu_si512(ql.add(64 * half).cast());
                        let h =
                            _mm512_broadcast_i64x4(_mm256_loadu_si256(qh.add(32 * half).cast()));
                        vals[2 * half] = _mm512_or_si512(
                            _mm512_and_si512(l, low4),
                            _mm512_and_si512(_mm512_sllv_epi16(h, shift_lo), high2),
                        );
                        vals[2 * half + 1] = _mm512_or_si512(
                            _mm512_and_si512(_mm512_srli_epi16(l, 4), low4),
                            _mm512_and_si512(_mm512_srlv_epi16(h, shift_hi), high2),
                        );
                        lane_scales[2 * half] = _mm512_permutexvar_epi32(subs[2 * half], scales);
                        lane_scales[2 * half + 1] =
                            _mm512_permutexvar_epi32(subs[2 * half + 1], scales);
                    }
                    for (acc, act) in acc.iter_mut().zip(&acts) {
                        let a = &act[b];
                        let mut dot = _mm512_setzero_si512();
                        for (i, (v, s)) in vals.iter().zip(&lane_scales).enumerate() {
                            let q = _mm512_loadu_si512(a.qs.as_ptr().add(64 * i).cast());
                            // |p| ≤ 4 × 63 × 127 fits its lane's low 16 bits (the high
                            // 16 are its sign), so one `dpwssd` with the scale in the low
                            // half and 0 above adds p × scale exactly.
                            let p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), *v, q);
                            dot = _mm512_dpwssd_epi32(dot, p, *s);
                        }
                        // Values are stored +32: subtract 32 × Σ scale × (sum of activations).
                        let offset = _mm256_madd_epi16(
                            scales16,
                            _mm256_loadu_si256(a.sums16.as_ptr().cast()),
                        );
                        let offset = _mm512_slli_epi32(_mm512_zextsi256_si512(offset), 5);
                        dot = _mm512_sub_epi32(dot, offset);
                        *acc =
                            _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(d * a.d), *acc);
                    }
                }
                for (r, a) in acc.iter().enumerate() {
                    *dst.at((r0 + r) * n + c) = _mm512_reduce_add_ps(*a);
                }
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::*;

    /// # Safety
    /// Never to be called: [`available`] is false off x86-64.
    pub(super) unsafe fn q4k_unit(
        _: &Q4KTiles,
        _: &Q8Rows,
        _: Range<usize>,
        _: usize,
        _: SharedMut,
        _: usize,
    ) {
        unreachable!("available() is false off x86-64")
    }

    /// # Safety
    /// As above.
    pub(super) unsafe fn q6k_unit(
        _: &Q6KRows,
        _: &Q8Rows,
        _: Range<usize>,
        _: Range<usize>,
        _: SharedMut,
        _: usize,
    ) {
        unreachable!("available() is false off x86-64")
    }

    /// # Safety
    /// As above.
    pub(super) unsafe fn quantize_block(_: &[f32; QK], _: &mut Q8Block) {
        unreachable!("available() is false off x86-64")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::linear::{project, Weight};
    use candle_core::{Device, Tensor};
    use rand::{Rng, SeedableRng};

    /// Asserts that these kernels run exactly when the CPU has them and
    /// `REPOHOP_PORTABLE_KERNELS=1` (the test script's second run) does not turn them off, so
    /// that the two runs cannot silently test the same path twice.
    fn assert_kernels_follow_env() {
        crate::embed::kernels::assert_dispatch_follows_env();
        let env = |name: &str| std::env::var_os(name).is_some_and(|v| v == "1");
        let (portable, avx2) = (env("REPOHOP_PORTABLE_KERNELS"), env("REPOHOP_AVX2_KERNELS"));
        let want = match detected() {
            _ if portable => None,
            Some(QuantIsa::Avx512Vnni) if avx2 => Some(QuantIsa::Avx2),
            other => other,
        };
        assert_eq!(
            isa(),
            want,
            "REPOHOP_PORTABLE_KERNELS={portable} REPOHOP_AVX2_KERNELS={avx2}"
        );
    }

    fn random(rows: usize, cols: usize, seed: u64) -> Tensor {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).unwrap()
    }

    /// `x × wᵀ` in f64 from the dequantized weight: what the kernels approximate, up to the
    /// 8-bit quantization of `x`.
    fn reference(w: &QTensor, x: &Tensor) -> Vec<Vec<f64>> {
        let w = w
            .dequantize(&Device::Cpu)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let x = x.to_vec2::<f32>().unwrap();
        x.iter()
            .map(|xr| {
                w.iter()
                    .map(|wr| wr.iter().zip(xr).map(|(a, b)| *a as f64 * *b as f64).sum())
                    .collect()
            })
            .collect()
    }

    fn assert_close(got: &Tensor, want: &[Vec<f64>]) {
        let got = got.to_vec2::<f32>().unwrap();
        let scale = want.iter().flatten().fold(0f64, |m, v| m.max(v.abs()));
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.len(), w.len());
            for (a, b) in g.iter().zip(w) {
                // 8-bit activations: ~0.4% of a typical output; 2% of the largest is far
                // below any layout or scale mistake, which is O(100%).
                assert!(
                    (*a as f64 - b).abs() <= 0.02 * scale,
                    "{a} vs {b} (scale {scale})"
                );
            }
        }
    }

    #[test]
    fn q4k_tiles_match_the_dequantized_product() {
        assert_kernels_follow_env();
        let (n, k) = (48, 768);
        let quantize = || QTensor::quantize(&random(n, k, 1), GgmlDType::Q4K).unwrap();
        let wt = quantize();
        let w = Weight::from_qtensor(quantize()).unwrap();
        assert_eq!(matches!(w, Weight::Q4K(_)), available());
        // 1 row is decode; 7 rows cover a full and a partial register block.
        for rows in [1, 2, 7] {
            let x = random(rows, k, 10 + rows as u64);
            assert_close(&w.forward(&x).unwrap(), &reference(&wt, &x));
        }
    }

    #[test]
    fn q6k_tiles_match_the_dequantized_product() {
        assert_kernels_follow_env();
        // 48 rows tile; 1, 5 (one kernel call), 8 + 5 and 8·3 + 1 activation rows (prefill).
        let (n, k) = (48, 768);
        let wt = QTensor::quantize(&random(n, k, 5), GgmlDType::Q6K).unwrap();
        let xs: Vec<Tensor> = [1, 5, 13, 25]
            .iter()
            .map(|&rows| random(rows, k, 6 + rows as u64))
            .collect();
        let wants: Vec<_> = xs.iter().map(|x| reference(&wt, x)).collect();
        let w = Weight::from_qtensor(wt).unwrap();
        assert_eq!(matches!(w, Weight::Q6K(_)), q6k_tiled());
        for (x, want) in xs.iter().zip(&wants) {
            assert_close(&w.forward(x).unwrap(), want);
        }
    }

    #[test]
    fn q6k_rows_match_the_dequantized_product() {
        assert_kernels_follow_env();
        // 40 rows: five 8-row units, the last of them partial in a fused call below.
        let (n, k) = (40, 512);
        let wt = QTensor::quantize(&random(n, k, 2), GgmlDType::Q6K).unwrap();
        let x = random(1, k, 3);
        let want = reference(&wt, &x);
        let w = Weight::from_qtensor(wt).unwrap();
        assert!(matches!(w, Weight::Candle(_)));
        assert_close(&w.forward(&x).unwrap(), &want);
        // Up to Q6K_MAX_ROWS rows go through our kernel, more take candle's path;
        // the result is the same product.
        let x3 = random(Q6K_MAX_ROWS + 3, k, 4);
        let want3 = {
            let Weight::Candle(candle_core::quantized::QMatMul::QTensor(t)) = &w else {
                unreachable!()
            };
            reference(t, &x3)
        };
        assert_close(&w.forward(&x3).unwrap(), &want3);
    }

    #[test]
    fn a_few_rows_at_once_are_the_rows_one_by_one_bit_for_bit() {
        assert_kernels_follow_env();
        let k = 512;
        for dtype in [GgmlDType::Q4K, GgmlDType::Q6K] {
            let w =
                Weight::from_qtensor(QTensor::quantize(&random(48, k, 9), dtype).unwrap()).unwrap();
            if !w.rows_exact() {
                eprintln!("{dtype:?}: not multiplied by our kernels here");
                continue;
            }
            let x = random(Q6K_MAX_ROWS, k, 11);
            let bits = |t: Tensor| -> Vec<u32> {
                t.flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|f| f.to_bits())
                    .collect()
            };
            let one_by_one: Vec<Vec<u32>> = (0..Q6K_MAX_ROWS)
                .map(|r| bits(w.forward(&x.narrow(0, r, 1).unwrap()).unwrap()))
                .collect();
            // Every pass size, so every kernel width (1 to 8 rows) and split of a pass into
            // kernel calls runs.
            for rows in 2..=Q6K_MAX_ROWS {
                let together = bits(w.forward(&x.narrow(0, 0, rows).unwrap()).unwrap());
                assert_eq!(
                    together,
                    one_by_one[..rows].concat(),
                    "{dtype:?}, {rows} rows"
                );
            }
        }
    }

    #[test]
    fn mixed_weights_share_one_pass() {
        assert_kernels_follow_env();
        let k = 512;
        let a = QTensor::quantize(&random(32, k, 5), GgmlDType::Q4K).unwrap();
        let b = QTensor::quantize(&random(13, k, 6), GgmlDType::Q6K).unwrap();
        // 24 rows don't tile by 16: candle keeps it.
        let c = QTensor::quantize(&random(24, k, 7), GgmlDType::Q4K).unwrap();
        // 16 rows tile (on AVX-512 machines).
        let e = QTensor::quantize(&random(16, k, 9), GgmlDType::Q6K).unwrap();
        let x = random(1, k, 8);
        let want = [&a, &b, &c, &e].map(|t| reference(t, &x));
        let ws: Vec<Weight> = [a, b, c, e]
            .into_iter()
            .map(|t| Weight::from_qtensor(t).unwrap())
            .collect();
        assert!(matches!(ws[2], Weight::Candle(_)));
        let ys = project(&ws.iter().collect::<Vec<_>>(), &x).unwrap();
        for (y, w) in ys.iter().zip(&want) {
            assert_close(y, w);
        }
    }

    #[test]
    fn activation_blocks_round_trip() {
        assert_kernels_follow_env();
        if !available() {
            eprintln!("no AVX2 here: activations are never quantized by us");
            return;
        }
        let x: Vec<f32> = (0..512)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let q = Q8Rows::quantize(&x, 2, 256);
        for (b, block) in q.blocks.iter().enumerate() {
            let src = &x[b * 256..(b + 1) * 256];
            for (v, q8) in src.iter().zip(block.qs) {
                assert!((v - block.d * q8 as f32).abs() <= block.d * 0.5 + 1e-6);
            }
            assert_eq!(block.qs.iter().map(|q| q.unsigned_abs()).max(), Some(127));
            let total: i32 = block.qs.iter().map(|&q| q as i32).sum();
            assert_eq!(block.sums16.iter().map(|&s| s as i32).sum::<i32>(), total);
            assert_eq!(block.sums32.iter().sum::<f32>() as i32, total);
        }
        let zeros = Q8Rows::quantize(&[0.0; 256], 1, 256);
        assert_eq!(zeros.blocks[0].d, 0.0);
        assert!(zeros.blocks[0].qs.iter().all(|&q| q == 0));
    }
}
