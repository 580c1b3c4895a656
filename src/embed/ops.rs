//! Building blocks shared by the networks: linear layers with pre-transposed weights, and
//! attention over candle ops.

use candle_core::{DType, Result, Tensor, D};

use super::fused;
pub use super::fused::After;

use super::weights::Weights;
use super::EmbedError;

/// `y = x W + b` with `W` stored `(in, out)` contiguous, so the GEMM reads it row-major.
pub struct Linear {
    w: Tensor,
    b: Option<Tensor>,
}

impl Linear {
    /// Load `{name}.weight` (`out × in`, the PyTorch layout) and, if `bias`, `{name}.bias`.
    pub fn load(
        weights: &Weights,
        name: &str,
        inp: usize,
        out: usize,
        bias: bool,
    ) -> std::result::Result<Self, EmbedError> {
        let w = weights.get(&format!("{name}.weight"), &[out, inp])?;
        let b = if bias {
            Some(weights.get(&format!("{name}.bias"), &[out])?)
        } else {
            None
        };
        Ok(Self { w, b })
    }

    /// Several layers reading the same input as one (e.g. query, key and value): their outputs
    /// side by side.
    pub fn fuse(
        parts: Vec<Linear>,
        path: &std::path::Path,
    ) -> std::result::Result<Self, EmbedError> {
        let err = |e: candle_core::Error| EmbedError::BadFile {
            path: path.into(),
            reason: e.to_string(),
        };
        let ws: Vec<&Tensor> = parts.iter().map(|p| &p.w).collect();
        let w = Tensor::cat(&ws, 0).map_err(err)?;
        let b = match parts
            .iter()
            .map(|p| p.b.as_ref())
            .collect::<Option<Vec<_>>>()
        {
            Some(bs) => Some(Tensor::cat(&bs, 0).map_err(err)?),
            None => None,
        };
        Ok(Self { w, b })
    }

    /// Transpose the weight once, after any fusing.
    pub fn prepared(self) -> Result<Self> {
        Ok(Self {
            w: self.w.t()?.contiguous()?,
            b: self.b,
        })
    }

    /// `x`: (rows, in) → (rows, out).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_with(x, None, After::Nothing)
    }

    /// `after(x W + b + residual)`: one fused pass on the CPU, candle ops elsewhere.
    pub fn forward_with(
        &self,
        x: &Tensor,
        residual: Option<&Tensor>,
        after: After,
    ) -> Result<Tensor> {
        let f32_cpu = |t: &Tensor| t.device().is_cpu() && t.dtype() == DType::F32;
        if f32_cpu(x) && f32_cpu(&self.w) && x.rank() == 2 {
            return fused::dense(&x.contiguous()?, &self.w, self.b.as_ref(), residual, after);
        }
        let mut y = x.matmul(&self.w)?;
        if let Some(b) = &self.b {
            y = y.broadcast_add(b)?;
        }
        if let Some(r) = residual {
            y = (y + r)?;
        }
        match after {
            After::Nothing => Ok(y),
            After::Gelu => y.gelu_erf(),
            After::Norm { gamma, beta, eps } => candle_nn::ops::layer_norm(&y, gamma, beta, eps),
        }
    }
}

/// Scaled dot-product attention. `q`, `k`, `v`: (batch, heads, len, head_dim); `bias` is added
/// to the scores (0 where allowed, a large negative number where masked) and broadcasts to
/// (batch, heads, len, len).
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, bias: &Tensor) -> Result<Tensor> {
    let scale = 1.0 / (q.dim(D::Minus1)? as f64).sqrt();
    let scores = (q.matmul(&k.t()?)? * scale)?.broadcast_add(bias)?;
    let probs = candle_nn::ops::softmax_last_dim(&scores)?;
    probs.matmul(v)
}

/// Rows divided by their L2 norm (a zero row stays zero rather than becoming NaN).
pub fn l2_normalize_rows(x: &Tensor) -> Result<Tensor> {
    let norm = x
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12, f64::MAX)?;
    x.broadcast_div(&norm)
}

/// Large negative score for masked positions: finite, so a fully masked row (padding) gives a
/// uniform distribution instead of NaN.
pub const MASKED: f32 = -1e30;
