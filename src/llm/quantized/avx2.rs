//! The quantized kernels for CPUs with AVX2, FMA and F16C but no AVX-512 VNNI (AMD Zen 2/3,
//! Intel before Ice Lake). Same data as the AVX-512 kernels: [`Q4KTile`]s, GGUF Q6_K blocks,
//! [`Q8Block`] activations. Without VNNI a 4-byte dot product is `maddubs` (pairs into i16)
//! then `madd` (i16 pairs into i32); the i16 sums cannot saturate here (see each kernel), so
//! the integer dot products are exact, as with VNNI.
//!
//! A Q4_K tile's 16 rows are taken as two halves of 8 (one register of f32 outputs), each
//! half's bytes being the first or second 32 of every 64-byte line; per sub-block and row the
//! float steps are the AVX-512 kernel's, in the same order.

use super::*;
use core::arch::x86_64::*;

/// One 256-value activation block to [`Q8Block`], rounding as the AVX-512 version does.
///
/// # Safety
/// AVX2 must be present.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quantize_block(x: &[f32; QK], out: &mut Q8Block) {
    // SAFETY: 8 values from 8·g, g < 32, lie inside `x`'s 256.
    let load = |g: usize| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * g)) };
    let abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
    let mut amax = _mm256_setzero_ps();
    for g in 0..QK / 8 {
        amax = _mm256_max_ps(amax, _mm256_and_ps(load(g), abs));
    }
    // SAFETY: a register's 32 bytes are 8 valid f32s.
    let lanes: [f32; 8] = unsafe { std::mem::transmute(amax) };
    let amax = lanes.iter().fold(0f32, |m, &v| m.max(v));
    if amax == 0.0 {
        *out = Q8Block::ZERO;
        return;
    }
    let inv = _mm256_set1_ps(127.0 / amax);
    for g in 0..QK / 16 {
        let a = _mm256_cvtps_epi32(_mm256_mul_ps(load(2 * g), inv));
        let b = _mm256_cvtps_epi32(_mm256_mul_ps(load(2 * g + 1), inv));
        // packs works per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7]; the permute restores order.
        let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(a, b));
        let bytes = _mm_packs_epi16(
            _mm256_castsi256_si128(words),
            _mm256_extracti128_si256::<1>(words),
        );
        // SAFETY: bytes 16·g..16·g + 16 of the 256 in `out.qs`.
        unsafe { _mm_storeu_si128(out.qs.as_mut_ptr().add(16 * g).cast(), bytes) };
        out.sums16[g] = hsum_i32(_mm256_add_epi32(a, b)) as i16;
    }
    out.fill_sums32();
    out.d = amax / 127.0;
}

/// The sum of 8 i32 lanes.
fn hsum_i32(v: __m256i) -> i32 {
    // SAFETY: a register's 32 bytes are 8 valid i32s.
    let lanes: [i32; 8] = unsafe { std::mem::transmute(v) };
    lanes.iter().sum()
}

/// Tile row group `group` of `w` times activation rows `rows` (at most [`AVX2_ROWS`]).
///
/// # Safety
/// AVX2, FMA and F16C must be present; otherwise as the AVX-512 `q4k_unit`.
pub(super) unsafe fn q4k_unit(
    w: &Q4KTiles,
    x: &Q8Rows,
    rows: Range<usize>,
    group: usize,
    dst: SharedMut,
    n: usize,
) {
    let tiles = w.group(group);
    // SAFETY: the caller's contract is `q4k_half`'s, for both halves, with R ≤ AVX2_ROWS.
    unsafe {
        for half in 0..2 {
            by_rows!(
                rows.len(),
                q4k_half(tiles, x, rows.start, group, half, dst, n)
            );
        }
    }
}

/// Rows `8·half..8·half + 8` of one row group's tiles times activation rows `r0..r0 + R`.
///
/// # Safety
/// As [`q4k_unit`], with `half < 2` and `r0 + R ≤ x.rows`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q4k_half<const R: usize>(
    tiles: &[Q4KTile],
    x: &Q8Rows,
    r0: usize,
    group: usize,
    half: usize,
    dst: SharedMut,
    n: usize,
) {
    // SAFETY: the features are present (contract). Weight loads: 32 bytes at
    // (s·4 + g)·64 + 32·half ≤ 2016 in `tile.qs` (2048 bytes); `d`/`dmin`/scales/mins 8
    // entries from 8·half of 16. Activation reads: 4 + 4 bytes at s·32 + g·8 ≤ 248 in `qs`
    // (256), rows bounds-checked by `x.row`. Stores: 8 values at row r0 + i, column
    // 16·group + 8·half, inside `dst` and this unit's own block (contract). Prefetches may
    // point anywhere.
    unsafe {
        let nibble = _mm256_set1_epi8(0x0F);
        let ones = _mm256_set1_epi16(1);
        let acts: [&[Q8Block]; R] = std::array::from_fn(|i| x.row(r0 + i));
        let mut acc = [_mm256_setzero_ps(); R];
        for (b, tile) in tiles.iter().enumerate() {
            let d = _mm256_cvtph_ps(_mm_loadu_si128(tile.d.as_ptr().add(8 * half).cast()));
            let dmin = _mm256_cvtph_ps(_mm_loadu_si128(tile.dmin.as_ptr().add(8 * half).cast()));
            let ahead = (tile as *const Q4KTile)
                .cast::<i8>()
                .wrapping_add(Q4K_AHEAD);
            let mut sum = [_mm256_setzero_ps(); R];
            for s in 0..8 {
                // Per row, 8 products of ≤ 2 × 15 × 127 summed in i16: ≤ 30,480, no saturation.
                let mut dots = [_mm256_setzero_si256(); R];
                for g in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add((s * 4 + g) * 64));
                    let w = _mm256_loadu_si256(
                        tile.qs.as_ptr().add((s * 4 + g) * 64 + 32 * half).cast(),
                    );
                    let lo = _mm256_and_si256(w, nibble);
                    let hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), nibble);
                    for i in 0..R {
                        let q = acts[i][b].qs.as_ptr().add(s * 32 + g * 8);
                        let a = _mm256_set1_epi32(std::ptr::read_unaligned(q as *const i32));
                        let c = _mm256_set1_epi32(std::ptr::read_unaligned(q.add(4) as *const i32));
                        let p = _mm256_add_epi16(
                            _mm256_maddubs_epi16(lo, a),
                            _mm256_maddubs_epi16(hi, c),
                        );
                        dots[i] = _mm256_add_epi16(dots[i], p);
                    }
                }
                // This half's 8 scale and min bytes of sub-block s, as f32 (a closure here would
                // not get the function's target features, and would not inline).
                let scale = _mm256_mul_ps(
                    d,
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        tile.scales[s].as_ptr().add(8 * half).cast(),
                    ))),
                );
                let min = _mm256_mul_ps(
                    dmin,
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        tile.mins[s].as_ptr().add(8 * half).cast(),
                    ))),
                );
                for i in 0..R {
                    let dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(dots[i], ones));
                    sum[i] = _mm256_fmadd_ps(dot, scale, sum[i]);
                    let bsum = _mm256_set1_ps(acts[i][b].sums32[s]);
                    sum[i] = _mm256_fnmadd_ps(min, bsum, sum[i]);
                }
            }
            for i in 0..R {
                acc[i] = _mm256_fmadd_ps(sum[i], _mm256_set1_ps(acts[i][b].d), acc[i]);
            }
        }
        for (i, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(dst.at((r0 + i) * n + group * TILE_ROWS + 8 * half), *a);
        }
    }
}

/// Output columns `cols` of activation rows `rows` (at most [`AVX2_ROWS`]) times a Q6_K weight.
///
/// # Safety
/// AVX2, FMA and F16C must be present; otherwise as the AVX-512 `q6k_unit`.
pub(super) unsafe fn q6k_unit(
    w: &Q6KRows,
    x: &Q8Rows,
    rows: Range<usize>,
    cols: Range<usize>,
    dst: SharedMut,
    n: usize,
) {
    // SAFETY: the caller's contract is `q6k_rows`'s, with R = rows.len() ≤ AVX2_ROWS.
    unsafe { by_rows!(rows.len(), q6k_rows(w, x, rows.start, cols, dst, n)) }
}

/// Columns `cols` of activation rows `r0..r0 + R` times a Q6_K weight; each block is unpacked
/// once for all the rows, and each row's arithmetic does not depend on R.
///
/// # Safety
/// As [`q6k_unit`], with `r0 + R ≤ x.rows`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn q6k_rows<const R: usize>(
    w: &Q6KRows,
    x: &Q8Rows,
    r0: usize,
    cols: Range<usize>,
    dst: SharedMut,
    n: usize,
) {
    // SAFETY: the features are present (contract). `row` is a bounds-checked slice of
    // `per_row` blocks, so block b's 210 bytes (ql 0..128, qh 128..192, scales 192..208,
    // d 208..210) are in bounds; each activation row holds `per_row` blocks, `a.qs` read in
    // 32-byte parts (256 bytes), `a.sums16` 32 bytes; `dst.at((r0 + r) * n + c)` with r < R,
    // c < n lies in `dst`. Prefetches never fault.
    unsafe {
        let per_row = w.k / QK;
        let acts: [&[Q8Block]; R] = std::array::from_fn(|r| x.row(r0 + r));
        let low4 = _mm256_set1_epi8(0x0F);
        let high2 = _mm256_set1_epi8(0x30);
        for c in cols {
            let row = &w.data[c * per_row * Q6K_BLOCK..(c + 1) * per_row * Q6K_BLOCK];
            let mut acc = [_mm256_setzero_ps(); R];
            for b in 0..per_row {
                let blk = row.as_ptr().add(b * Q6K_BLOCK);
                for j in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(blk.wrapping_add(Q6K_AHEAD + 64 * j).cast());
                }
                let (ql, qh, sc) = (blk, blk.add(128), blk.add(192));
                let d_bits = u16::from_le_bytes([*blk.add(208), *blk.add(209)]);
                let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(d_bits as i32)));
                let scales = sc.cast::<i8>();
                // The block's 6-bit values (+32), 32 at a time in order, and per part the i16
                // scales of its two 16-value sub-blocks.
                let mut vals = [_mm256_setzero_si256(); 8];
                let mut part_scales = [_mm256_setzero_si256(); 8];
                for half in 0..2 {
                    let l0 = _mm256_loadu_si256(ql.add(64 * half).cast());
                    let l1 = _mm256_loadu_si256(ql.add(64 * half + 32).cast());
                    let h = _mm256_loadu_si256(qh.add(32 * half).cast());
                    let high = |v: __m256i| _mm256_and_si256(v, high2);
                    vals[4 * half] =
                        _mm256_or_si256(_mm256_and_si256(l0, low4), high(_mm256_slli_epi16(h, 4)));
                    vals[4 * half + 1] =
                        _mm256_or_si256(_mm256_and_si256(l1, low4), high(_mm256_slli_epi16(h, 2)));
                    vals[4 * half + 2] =
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), high(h));
                    vals[4 * half + 3] = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                        high(_mm256_srli_epi16(h, 2)),
                    );
                }
                for (p, s) in part_scales.iter_mut().enumerate() {
                    *s = _mm256_setr_m128i(
                        _mm_set1_epi16(*scales.add(2 * p) as i16),
                        _mm_set1_epi16(*scales.add(2 * p + 1) as i16),
                    );
                }
                let scales16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(sc.cast()));
                for (acc, act) in acc.iter_mut().zip(&acts) {
                    let a = &act[b];
                    // Per part: i16 pairs ≤ 2 × 63 × 127 = 16,002; times a scale (|s| ≤ 128) and
                    // summed over the block's 8 parts the i32 lanes stay below 2^31.
                    let mut dot = _mm256_setzero_si256();
                    for (p, (v, s)) in vals.iter().zip(&part_scales).enumerate() {
                        let q = _mm256_loadu_si256(a.qs.as_ptr().add(32 * p).cast());
                        let pairs = _mm256_maddubs_epi16(*v, q);
                        dot = _mm256_add_epi32(dot, _mm256_madd_epi16(pairs, *s));
                    }
                    // Values are stored +32: subtract 32 × Σ scale × (sum of activations).
                    let offset =
                        _mm256_madd_epi16(scales16, _mm256_loadu_si256(a.sums16.as_ptr().cast()));
                    dot = _mm256_sub_epi32(dot, _mm256_slli_epi32(offset, 5));
                    *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d), *acc);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                let lanes: [f32; 8] = std::mem::transmute(*a);
                *dst.at((r0 + r) * n + c) = lanes.iter().sum();
            }
        }
    }
}
