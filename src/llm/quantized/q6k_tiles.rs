//! Q6_K repacked into 16-row tiles for the AVX-512 VNNI kernels, as [`super::Q4KTiles`]: one
//! VNNI instruction takes 4 columns of 16 weight rows, so a sub-block's scale is applied once
//! per 16 rows and activation row, not once per weight row and activation row as from the
//! GGUF's row-major blocks (the AVX2 kernel's layout), and several activation rows share one
//! unpacking. Same bytes as the GGUF (3,360 per 16×256 weights).

use std::ops::Range;

use candle_core::quantized::{GgmlDType, QTensor};

use super::{Q8Rows, SharedMut, Q6K_BLOCK, QK, TILE_ROWS};

/// 16 rows × 256 columns of a Q6_K matrix. Row `r` has value `d[r] × scales[s][r] × (u − 32)`
/// in sub-block `s` (16 columns), `u` the stored 6-bit value.
#[repr(C, align(64))]
pub(super) struct Q6KTile {
    /// `[group of 8 columns (32)][row (16)][4 bytes]`: the low 4 bits of `u`, byte `j` of a
    /// group holding column `8g + j` in its low nibble and `8g + j + 4` in its high one.
    ql: [u8; QK / 8 * TILE_ROWS * 4],
    /// `[group pair (16)][row (16)][4 bytes]`: the high 2 bits of `u`; byte `j` holds, for the
    /// pair's first group, column `8g + j` at bits 4-5 and `8g + j + 4` at bits 6-7, and for
    /// the second group the same columns at bits 0-1 and 2-3.
    qh: [u8; QK / 16 * TILE_ROWS * 4],
    scales: [[i8; TILE_ROWS]; QK / 16],
    /// f16 bits.
    d: [u16; TILE_ROWS],
}

/// A Q6_K weight `(n, k)` repacked into tiles, `[row tile][column block]`.
pub(crate) struct Q6KTiles {
    tiles: Vec<Q6KTile>,
    n: usize,
    k: usize,
}

/// The stored 6-bit values (0..64) of one GGUF Q6_K block, in column order.
fn block_values(blk: &[u8]) -> [u8; QK] {
    let (ql, qh) = (&blk[..128], &blk[128..192]);
    let mut u = [0u8; QK];
    // Each 128-column half: ql bytes l and l + 32 hold columns l, l + 32 (low nibbles) and
    // l + 64, l + 96 (high nibbles); qh byte l holds their high 2 bits, in that order.
    for half in 0..2 {
        let (ql, qh) = (&ql[64 * half..], &qh[32 * half..]);
        for l in 0..32 {
            let at = 128 * half + l;
            u[at] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
            u[at + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
            u[at + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
            u[at + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
        }
    }
    u
}

impl Q6KTiles {
    /// Repacks a CPU Q6_K tensor of shape `(n, k)`; `None` for other dtypes or shapes that
    /// do not tile (`n` not a multiple of 16, `k` of 256).
    pub(crate) fn pack(t: &QTensor) -> candle_core::Result<Option<Self>> {
        let Some((n, k, data)) = super::tileable(t, GgmlDType::Q6K, Q6K_BLOCK)? else {
            return Ok(None);
        };
        let per_row = k / QK;
        let mut tiles = Vec::with_capacity(n / TILE_ROWS * per_row);
        for t in 0..n / TILE_ROWS {
            for b in 0..per_row {
                let mut tile = Q6KTile {
                    ql: [0; QK / 8 * TILE_ROWS * 4],
                    qh: [0; QK / 16 * TILE_ROWS * 4],
                    scales: [[0; TILE_ROWS]; QK / 16],
                    d: [0; TILE_ROWS],
                };
                for r in 0..TILE_ROWS {
                    let at = ((t * TILE_ROWS + r) * per_row + b) * Q6K_BLOCK;
                    let blk = &data[at..at + Q6K_BLOCK];
                    tile.d[r] = u16::from_le_bytes([blk[208], blk[209]]);
                    for s in 0..QK / 16 {
                        tile.scales[s][r] = blk[192 + s] as i8;
                    }
                    let u = block_values(blk);
                    for g in 0..QK / 8 {
                        let high_at = if g.is_multiple_of(2) { 4 } else { 0 };
                        for j in 0..4 {
                            let (a, b) = (u[8 * g + j], u[8 * g + j + 4]);
                            tile.ql[(g * TILE_ROWS + r) * 4 + j] = (a & 0x0F) | ((b & 0x0F) << 4);
                            tile.qh[(g / 2 * TILE_ROWS + r) * 4 + j] |=
                                ((a >> 4) | ((b >> 4) << 2)) << high_at;
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

    pub(crate) fn k(&self) -> usize {
        self.k
    }

    /// The tiles of 16-row group `group`, one per 256-column block.
    fn group(&self, group: usize) -> &[Q6KTile] {
        let per_row = self.k / QK;
        &self.tiles[group * per_row..(group + 1) * per_row]
    }
}

/// Tile row group `group` of `w` times activation rows `rows` (at most 8).
///
/// # Safety
/// AVX-512 F/BW/VNNI and F16C must be present; `w.k` must equal `x`'s row length, `n` must be
/// `w.n`, `rows` must lie in `0..x.rows` and `group` in `0..n / 16`; `dst` must hold
/// `x.rows × n` values, of which no one else writes this unit's `rows × 16` block meanwhile.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn unit(
    w: &Q6KTiles,
    x: &Q8Rows,
    rows: Range<usize>,
    group: usize,
    dst: SharedMut,
    n: usize,
) {
    let tiles = w.group(group);
    // SAFETY: the caller's contract is `tiles_times`'s, with R = rows.len() ≤ 8.
    unsafe { by_rows!(8; rows.len(), tiles_times(tiles, x, rows.start, group, dst, n)) }
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) unsafe fn unit(
    _: &Q6KTiles,
    _: &Q8Rows,
    _: Range<usize>,
    _: usize,
    _: SharedMut,
    _: usize,
) {
    unreachable!("our quantized kernels run on x86-64 only")
}

/// `tiles` (one row group's, one per 256-column block) times activation rows `r0..r0 + R`
/// into `dst`. Each row's arithmetic is the same whatever R is.
///
/// # Safety
/// As [`unit`], with `tiles.len()` blocks per activation row and `r0 + R ≤ x.rows`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni,f16c")]
unsafe fn tiles_times<const R: usize>(
    tiles: &[Q6KTile],
    x: &Q8Rows,
    r0: usize,
    group: usize,
    dst: SharedMut,
    n: usize,
) {
    use super::x86::bcast4;
    use core::arch::x86_64::*;
    // SAFETY: the features are present (contract). Weight loads: 64 bytes at g·64 ≤ 1984 in
    // `ql` (2048), at p·64 ≤ 960 in `qh` (1024); 16 at s·16 in `scales` (256); `d` 32 bytes.
    // Activation reads: 4 + 4 bytes at g·8 ≤ 252 in `qs` (256), 4 at 4·p ≤ 28 in `sums16`
    // (32), rows r0..r0+R bounds-checked by `x.row`. Stores: 16 values at row r0 + i, column
    // 16·group, inside `dst` and this unit's own block (contract). Prefetches never fault.
    unsafe {
        let low4 = _mm512_set1_epi8(0x0F);
        let high2 = _mm512_set1_epi8(0x30);
        let acts: [&[super::Q8Block]; R] = std::array::from_fn(|i| x.row(r0 + i));
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, tile) in tiles.iter().enumerate() {
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(tile.d.as_ptr().cast()));
            let widen =
                |s: usize| _mm512_cvtepi8_epi32(_mm_loadu_si128(tile.scales[s].as_ptr().cast()));
            // Values are stored +32: first −32 × Σ_s scale_s × (sum of the sub-block's
            // activations), exact in integers, two sub-blocks per `dpwssd` (scales as i16 pairs).
            let low16 = _mm512_set1_epi32(0xFFFF);
            let scale_pairs: [__m512i; 8] = std::array::from_fn(|p| {
                _mm512_or_si512(
                    _mm512_and_si512(widen(2 * p), low16),
                    _mm512_slli_epi32(widen(2 * p + 1), 16),
                )
            });
            let d32 = _mm512_mul_ps(d, _mm512_set1_ps(32.0));
            let mut sum: [__m512; R] = std::array::from_fn(|i| {
                let sums = acts[i][b].sums16.as_ptr().cast::<i8>();
                let mut m = _mm512_setzero_si512();
                for (p, pair) in scale_pairs.iter().enumerate() {
                    m = _mm512_dpwssd_epi32(m, *pair, bcast4(sums.add(4 * p)));
                }
                _mm512_fnmadd_ps(d32, _mm512_cvtepi32_ps(m), _mm512_setzero_ps())
            });
            // Group g's 8 columns (two per product lane byte pair), for every row, into `dots`.
            let dot_step = |g: usize, dots: &mut [__m512i; R]| {
                let w = _mm512_loadu_si512(tile.ql.as_ptr().add(g * 64).cast());
                let h = _mm512_loadu_si512(tile.qh.as_ptr().add(g / 2 * 64).cast());
                let (h_lo, h_hi) = if g.is_multiple_of(2) {
                    (h, _mm512_srli_epi16(h, 2))
                } else {
                    (_mm512_slli_epi16(h, 4), _mm512_slli_epi16(h, 2))
                };
                let lo = _mm512_or_si512(_mm512_and_si512(w, low4), _mm512_and_si512(h_lo, high2));
                let hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(w, 4), low4),
                    _mm512_and_si512(h_hi, high2),
                );
                for (dot, act) in dots.iter_mut().zip(&acts) {
                    let q = act[b].qs.as_ptr().add(g * 8);
                    *dot = _mm512_dpbusd_epi32(*dot, lo, bcast4(q));
                    *dot = _mm512_dpbusd_epi32(*dot, hi, bcast4(q.add(4)));
                }
            };
            // Sub-block s's products, scaled, into every row's sum (in order of s).
            let scaled = |s: usize, dots: &[__m512i; R], sum: &mut [__m512; R]| {
                let scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(widen(s)));
                for (acc, dot) in sum.iter_mut().zip(dots) {
                    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(*dot), scale, *acc);
                }
            };
            let ahead = (tile as *const Q6KTile).cast::<i8>().wrapping_add(AHEAD);
            // 53 lines a tile: 4 prefetches per sub-block cover them.
            let prefetch = |s: usize| {
                for j in 0..4 {
                    _mm_prefetch::<{ super::WEIGHT_HINT }>(ahead.wrapping_add((s * 4 + j) * 64));
                }
            };
            if R <= 4 {
                // Sub-blocks in pairs: two independent dot-product chains per row.
                for pair in 0..QK / 32 {
                    let (sa, sb) = (2 * pair, 2 * pair + 1);
                    prefetch(sa);
                    prefetch(sb);
                    let mut ia = [_mm512_setzero_si512(); R];
                    let mut ib = [_mm512_setzero_si512(); R];
                    for g in 0..2 {
                        dot_step(2 * sa + g, &mut ia);
                        dot_step(2 * sb + g, &mut ib);
                    }
                    scaled(sa, &ia, &mut sum);
                    scaled(sb, &ib, &mut sum);
                }
            } else {
                for s in 0..QK / 16 {
                    prefetch(s);
                    let mut dots = [_mm512_setzero_si512(); R];
                    dot_step(2 * s, &mut dots);
                    dot_step(2 * s + 1, &mut dots);
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

/// How far ahead of the tile being multiplied the kernel prefetches, in bytes.
#[cfg(target_arch = "x86_64")]
const AHEAD: usize = 4 * std::mem::size_of::<Q6KTile>();
