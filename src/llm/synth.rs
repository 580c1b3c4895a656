//! Models of a real model's layout with random weights: the same metadata (architecture,
//! shapes, tokenizer vocabulary) and the same tensor names, shapes and block types, filled with
//! random but well-scaled blocks. Only speed is measured on them, on machines the real weights
//! cannot reach (a lent GPU takes a few MiB, not the 1.1 GB model): a step costs the same
//! whatever the weights hold. The text they write is noise.

use std::io::{Read, Seek, Write};

use candle_core::quantized::{ggml_file::qtensor_from_ggml, gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Result};
use rand::{Rng, SeedableRng};

/// One tensor to make: name, shape (candle's order, outermost first) and block type.
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<usize>,
    pub dtype: GgmlDType,
}

/// The tensors a GGUF header declares, in file order. Only the header is read: a file cut
/// after it will do.
pub fn layout_of<R: Read + Seek>(reader: &mut R) -> Result<(gguf_file::Content, Vec<TensorSpec>)> {
    let content = gguf_file::Content::read(reader)?;
    let mut infos: Vec<_> = content.tensor_infos.iter().collect();
    infos.sort_by_key(|(_, i)| i.offset);
    let specs = infos
        .into_iter()
        .map(|(name, info)| TensorSpec {
            name: name.clone(),
            dims: info.shape.dims().to_vec(),
            dtype: info.ggml_dtype,
        })
        .collect();
    Ok((content, specs))
}

/// Writes a GGUF with `metadata` and random tensors of `specs`.
pub fn write_random<W: Write + Seek>(
    out: &mut W,
    metadata: &[(&str, &gguf_file::Value)],
    specs: &[TensorSpec],
    seed: u64,
) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let tensors = specs
        .iter()
        .map(|s| random_tensor(s, &mut rng))
        .collect::<Result<Vec<_>>>()?;
    let named: Vec<(&str, &QTensor)> = specs
        .iter()
        .zip(&tensors)
        .map(|(s, t)| (s.name.as_str(), t))
        .collect();
    gguf_file::write(out, metadata, &named)
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// Random blocks of one tensor. Weights come out within about ±0.05 with mean near 0, norm
/// weights near 1, so activations stay finite through many layers.
fn random_tensor(spec: &TensorSpec, rng: &mut impl Rng) -> Result<QTensor> {
    let elems: usize = spec.dims.iter().product();
    let bytes = elems / spec.dtype.block_size() * spec.dtype.type_size();
    let mut data = vec![0u8; bytes];
    rng.fill(&mut data[..]);
    match spec.dtype {
        GgmlDType::F32 => {
            let norm = spec.name.contains("norm");
            for c in data.chunks_exact_mut(4) {
                let noise = rng.random_range(-0.02f32..0.02);
                let v = if norm { 1.0 + noise } else { noise };
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlDType::F16 => {
            for c in data.chunks_exact_mut(2) {
                c.copy_from_slice(&f16_bytes(rng.random_range(-0.05f32..0.05)));
            }
        }
        // d, dmin; 6-bit scales and mins are random bytes: E[w] = 31.5 (7.5 d - dmin) = 0.
        GgmlDType::Q4K => {
            for b in data.chunks_exact_mut(144) {
                let d = rng.random_range(5e-5f32..1e-4);
                b[0..2].copy_from_slice(&f16_bytes(d));
                b[2..4].copy_from_slice(&f16_bytes(7.5 * d));
            }
        }
        // Signed 6-bit weights times signed 8-bit scales: keep the scales small.
        GgmlDType::Q6K => {
            for b in data.chunks_exact_mut(210) {
                for s in &mut b[192..208] {
                    *s = rng.random_range(-16i8..16) as u8;
                }
                b[208..210].copy_from_slice(&f16_bytes(rng.random_range(5e-5f32..1e-4)));
            }
        }
        GgmlDType::Q8_0 => {
            for b in data.chunks_exact_mut(34) {
                b[0..2].copy_from_slice(&f16_bytes(rng.random_range(2e-4f32..4e-4)));
            }
        }
        other => candle_core::bail!(
            "no random blocks for {other:?} (tensor {}): F32, F16, Q4_K, Q6_K and Q8_0 only",
            spec.name
        ),
    }
    qtensor_from_ggml(spec.dtype, &data, spec.dims.clone(), &Device::Cpu)
}
