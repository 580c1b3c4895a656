//! The decoder's weight matrices and their products with activations: our quantized kernels
//! (see [`super::quantized`]) where the CPU runs them, candle's `QMatMul` everywhere else.

use std::borrow::Cow;

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Module, Result, Tensor};

use super::kernels::host_f32;
use super::quantized::{self, Q4KTiles, Q6KRows, Q6KTiles, Q8Rows, QWeight};

/// A weight `(n, k)` multiplied as `x × Wᵀ`.
pub(crate) enum Weight {
    Candle(QMatMul),
    /// Q4_K repacked for our kernels; the GGUF copy is dropped.
    Q4K(Q4KTiles),
    /// Q6_K repacked for our AVX-512 kernels; likewise.
    Q6K(Q6KTiles),
}

impl Weight {
    /// Repacks a CPU Q4_K tensor when our kernels run here, else hands it to candle.
    pub(crate) fn from_qtensor(t: QTensor) -> Result<Self> {
        if t.device().is_cpu() && quantized::available() {
            if let Some(tiles) = Q4KTiles::pack(&t)? {
                return Ok(Weight::Q4K(tiles));
            }
            if quantized::q6k_tiled() {
                if let Some(tiles) = Q6KTiles::pack(&t)? {
                    return Ok(Weight::Q6K(tiles));
                }
            }
        }
        Ok(Weight::Candle(QMatMul::from_qtensor(t)?))
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut ys = project(&[self], x)?;
        Ok(ys.remove(0))
    }

    /// Whether a few activation rows at once give each row's single-row result bit for bit:
    /// true for the weights our kernels multiply (tiles, and Q6_K blocks up to
    /// [`quantized::Q6K_MAX_ROWS`] rows) when they run here.
    pub(crate) fn rows_exact(&self) -> bool {
        quantized::available()
            && (matches!(self, Weight::Q4K(_) | Weight::Q6K(_)) || q6k_tensor(self).is_some())
    }
}

/// The Q6_K tensor behind a candle weight, for our kernel (up to `Q6K_MAX_ROWS` rows).
fn q6k_tensor(w: &Weight) -> Option<&QTensor> {
    match w {
        Weight::Candle(QMatMul::QTensor(t)) if t.dtype() == GgmlDType::Q6K => Some(t),
        _ => None,
    }
}

/// Multiplies `x` (`(…, k)`) by each weight. Weights our kernels take share one quantization
/// of `x` and one parallel region; so do candle's quantized ones of one dtype where candle
/// supports it.
pub(crate) fn project(ws: &[&Weight], x: &Tensor) -> Result<Vec<Tensor>> {
    let mut out: Vec<Option<Tensor>> = vec![None; ws.len()];
    if x.device().is_cpu() && quantized::available() {
        ours(ws, x, &mut out)?;
    }
    candle_fused(ws, x, &mut out)?;
    ws.iter()
        .zip(out)
        .map(|(w, y)| match (y, w) {
            (Some(y), _) => Ok(y),
            (None, Weight::Candle(m)) => m.forward(x),
            (None, Weight::Q4K(_) | Weight::Q6K(_)) => {
                candle_core::bail!("quantized tiles need a CPU input")
            }
        })
        .collect()
}

/// Runs the weights our kernels take (all tiles; Q6_K blocks up to `Q6K_MAX_ROWS` rows) into `out`.
fn ours(ws: &[&Weight], x: &Tensor, out: &mut [Option<Tensor>]) -> Result<()> {
    let dims = x.dims().to_vec();
    let Some((&k, lead)) = dims.split_last() else {
        return Ok(());
    };
    let rows: usize = lead.iter().product();
    if k == 0 || !k.is_multiple_of(256) || rows == 0 {
        return Ok(());
    }
    let q6k_data: Vec<Option<Cow<[u8]>>> = ws
        .iter()
        .map(|w| match q6k_tensor(w) {
            Some(t) if rows <= quantized::Q6K_MAX_ROWS => t.data().map(Some),
            _ => Ok(None),
        })
        .collect::<Result<_>>()?;
    let mut picked = Vec::new();
    let mut weights = Vec::new();
    for (i, w) in ws.iter().enumerate() {
        let weight = match (w, &q6k_data[i], q6k_tensor(w)) {
            (Weight::Q4K(t), _, _) if t.k() == k => Some(QWeight::Q4K(t)),
            (Weight::Q6K(t), _, _) if t.k() == k => Some(QWeight::Q6KTiles(t)),
            (_, Some(data), Some(t)) => Q6KRows::new(t, data).map(QWeight::Q6K),
            _ => None,
        };
        if let Some(weight) = weight {
            picked.push(i);
            weights.push(weight);
        }
    }
    if weights.is_empty() {
        return Ok(());
    }
    let x = x.to_dtype(candle_core::DType::F32)?.contiguous()?;
    let q8 = {
        let (guard, layout) = x.storage_and_layout();
        Q8Rows::quantize(host_f32(&guard, layout)?, rows, k)
    };
    let mut results = vec![Vec::new(); weights.len()];
    quantized::matmul(&weights, &q8, &mut results);
    for ((i, w), y) in picked.into_iter().zip(&weights).zip(results) {
        let mut shape = lead.to_vec();
        shape.push(match w {
            QWeight::Q4K(t) => t.n(),
            QWeight::Q6KTiles(t) => t.n(),
            QWeight::Q6K(_) => y.len() / rows,
        });
        out[i] = Some(Tensor::from_vec(y, shape, x.device())?);
    }
    Ok(())
}

/// candle's fused mat-vec for quantized weights of one dtype that share `x`.
fn candle_fused(ws: &[&Weight], x: &Tensor, out: &mut [Option<Tensor>]) -> Result<()> {
    let quantized: Vec<Option<&QTensor>> = ws
        .iter()
        .zip(out.iter())
        .map(|(w, y)| match (w, y) {
            (Weight::Candle(QMatMul::QTensor(t)), None) => Some(t.as_ref()),
            _ => None,
        })
        .collect();
    for (i, qt) in quantized.iter().enumerate() {
        let Some(qt) = qt else { continue };
        if out[i].is_some() {
            continue;
        }
        let same: Vec<usize> = (i..ws.len())
            .filter(|&j| quantized[j].is_some_and(|t| t.dtype() == qt.dtype()))
            .collect();
        if same.len() < 2 {
            continue;
        }
        let group: Vec<&QTensor> = same.iter().filter_map(|&j| quantized[j]).collect();
        if let Some(ys) = QTensor::gemv_fused_shared_lhs(&group, x)? {
            for (j, y) in same.into_iter().zip(ys) {
                out[j] = Some(y);
            }
        }
    }
    Ok(())
}
