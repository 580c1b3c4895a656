//! The encoder's dense layers on the CPU, each one pass over its output: the bias (plus the
//! residual) is written first and the GEMM accumulates onto it, then GELU or LayerNorm runs
//! over the rows in place. Through candle ops each of those steps allocates and sweeps a new
//! tensor, and at embedding batch sizes the fresh pages cost about as much as the sweeps.

use candle_core::{bail, Device, Result, Tensor};
use rayon::prelude::*;

use super::kernels::{gelu_in_place, host_f32, layer_norm_row};

/// What runs over the output after the product.
pub enum After<'a> {
    Nothing,
    /// GELU, erf form.
    Gelu,
    /// LayerNorm over each row.
    Norm {
        gamma: &'a Tensor,
        beta: &'a Tensor,
        eps: f32,
    },
}

/// Rows per parallel unit of the element-wise passes: enough work to outweigh scheduling.
const MIN_ROWS: usize = 16;

/// Fewest rows worth a thread of their own in the product.
const ROWS_PER_PART: usize = 64;

/// `after(x W + b + residual)` for contiguous f32 CPU tensors: `x` (rows, k), `w` (k, n),
/// `b` (n), `residual` (rows, n). Returns (rows, n).
pub fn dense(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    residual: Option<&Tensor>,
    after: After,
) -> Result<Tensor> {
    let (m, k) = x.dims2()?;
    let (wk, n) = w.dims2()?;
    if wk != k {
        bail!("dense: input of {k} columns for a weight of {wk} rows");
    }
    if m == 0 || n == 0 {
        return Tensor::zeros((m, n), candle_core::DType::F32, &Device::Cpu);
    }
    if k == 0 {
        bail!("dense: input rows of 0 columns");
    }
    let mut out: Vec<f32> = Vec::with_capacity(m * n);
    {
        let (xg, xl) = x.storage_and_layout();
        let (wg, wl) = w.storage_and_layout();
        let (bg, rg) = (
            b.map(|t| t.storage_and_layout()),
            residual.map(|t| t.storage_and_layout()),
        );
        let (xs, ws) = (host_f32(&xg, xl)?, host_f32(&wg, wl)?);
        let bs = bg.as_ref().map(|(g, l)| host_f32(g, l)).transpose()?;
        let rs = rg.as_ref().map(|(g, l)| host_f32(g, l)).transpose()?;
        if bs.is_some_and(|b| b.len() != n) || rs.is_some_and(|r| r.len() != m * n) {
            bail!("dense: bias or residual does not match the output ({m}, {n})");
        }
        let read_dst = bs.is_some() || rs.is_some();
        // Each thread fills and multiplies its own block of rows: a GEMM split inside
        // synchronises its threads at every panel, which costs more than packing the weight
        // once per thread.
        let parts = rayon::current_num_threads().clamp(1, m.div_ceil(ROWS_PER_PART));
        let per = m.div_ceil(parts);
        out.spare_capacity_mut()[..m * n]
            .par_chunks_mut(per * n)
            .zip(xs.par_chunks(per * k))
            .enumerate()
            .for_each(|(part, (o, x))| {
                let first = part * per;
                for (r, row) in o.chunks_mut(n).enumerate() {
                    let res = rs.map(|res| &res[(first + r) * n..(first + r + 1) * n]);
                    match (bs, res) {
                        (Some(b), Some(res)) => {
                            for ((o, &x), &y) in row.iter_mut().zip(res).zip(b) {
                                o.write(x + y);
                            }
                        }
                        (Some(v), None) | (None, Some(v)) => {
                            for (o, &y) in row.iter_mut().zip(v) {
                                o.write(y);
                            }
                        }
                        (None, None) => {}
                    }
                }
                // SAFETY: `o` is rows×n and `x` rows×k of the row-major output and input, `ws`
                // is k×n (the shapes were checked, the slices are the guards' contiguous data);
                // `o` is part of a fresh buffer, disjoint from both inputs, and the GEMM reads
                // it only with `read_dst`, when every element was written just above.
                unsafe {
                    gemm::gemm(
                        o.len() / n,
                        n,
                        k,
                        o.as_mut_ptr().cast::<f32>(),
                        1,
                        n as isize,
                        read_dst,
                        x.as_ptr(),
                        1,
                        k as isize,
                        ws.as_ptr(),
                        1,
                        n as isize,
                        1.0,
                        1.0,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    )
                }
            });
        // SAFETY: every element was written, by the fill (read_dst) and by the GEMM.
        unsafe { out.set_len(m * n) };
    }
    match after {
        After::Nothing => {}
        After::Gelu => out.par_chunks_mut(MIN_ROWS * n).for_each(gelu_in_place),
        After::Norm { gamma, beta, eps } => {
            let (gg, gl) = gamma.storage_and_layout();
            let (bg, bl) = beta.storage_and_layout();
            let (g, b) = (host_f32(&gg, gl)?, host_f32(&bg, bl)?);
            if g.len() != n || b.len() != n {
                bail!("dense: LayerNorm of {} for rows of {n}", g.len());
            }
            out.par_chunks_mut(n)
                .with_min_len(MIN_ROWS)
                .for_each(|row| layer_norm_row(row, g, b, eps));
        }
    }
    Tensor::from_vec(out, (m, n), &Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1) from a seed (no RNG: the test must not move).
    fn rand(shape: (usize, usize), seed: u64) -> Tensor {
        let v: Vec<f32> = (0..shape.0 * shape.1)
            .map(|i| {
                let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ seed.wrapping_mul(0xD1B5_4A32_D192_ED03);
                (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn assert_close(got: &Tensor, want: &Tensor, tol: f32) {
        let (g, w) = (
            got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        assert_eq!(g.len(), w.len());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!((a - b).abs() < tol, "element {i}: {a} vs {b}");
        }
    }

    #[test]
    fn a_fused_dense_layer_matches_the_candle_ops_it_replaces() {
        crate::embed::kernels::assert_dispatch_follows_env();
        let (m, k, n) = (150, 48, 40);
        let (x, w, res) = (rand((m, k), 1), rand((k, n), 2), rand((m, n), 3));
        let (b, gamma, beta) = (
            rand((1, n), 4).flatten_all().unwrap(),
            rand((1, n), 5).flatten_all().unwrap(),
            rand((1, n), 6).flatten_all().unwrap(),
        );
        let product = x.matmul(&w).unwrap();
        let biased = product.broadcast_add(&b).unwrap();

        assert_close(
            &dense(&x, &w, None, None, After::Nothing).unwrap(),
            &product,
            1e-4,
        );
        assert_close(
            &dense(&x, &w, Some(&b), None, After::Gelu).unwrap(),
            &biased.gelu_erf().unwrap(),
            1e-4,
        );
        let norm = After::Norm {
            gamma: &gamma,
            beta: &beta,
            eps: 1e-12,
        };
        let want =
            candle_nn::ops::layer_norm(&(&biased + &res).unwrap(), &gamma, &beta, 1e-12).unwrap();
        assert_close(
            &dense(&x, &w, Some(&b), Some(&res), norm).unwrap(),
            &want,
            1e-4,
        );
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let (x, w) = (rand((4, 8), 1), rand((6, 3), 2));
        assert!(dense(&x, &w, None, None, After::Nothing).is_err());
        let w = rand((8, 3), 2);
        let b = rand((1, 4), 3).flatten_all().unwrap();
        assert!(dense(&x, &w, Some(&b), None, After::Nothing).is_err());
    }
}
