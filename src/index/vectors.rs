//! The cached embedding matrix of a repository for one model: `N × d` L2-normalised f32 rows in
//! a safetensors file, plus a JSON sidecar naming each row's symbol and the hash of the text
//! embedded for it. Re-indexing embeds only texts whose hash is not in the cache; a cache that
//! is unreadable, corrupt or from another model is reported and rebuilt. Search is cosine
//! similarity by one matrix-vector product and a partial sort.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::embed::{EmbedError, EmbedStats, Embedder, TextKind};

/// One thing to index: what identifies it, where it is, and the text to embed.
#[derive(Debug, Clone)]
pub struct Item {
    /// Unique symbol key (e.g. `path::qualname`).
    pub key: String,
    pub qualname: String,
    pub path: String,
    pub start_line: u32,
    pub text: String,
}

/// One row of the index, as stored in the sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    pub key: String,
    pub qualname: String,
    pub path: String,
    pub start_line: u32,
    /// sha256 (hex, 128 bits) of the embedded text.
    pub hash: String,
}

/// A search result: the row, its position in the index, its cosine similarity to the query.
#[derive(Debug, Clone, Serialize)]
pub struct Hit<'a> {
    #[serde(flatten)]
    pub row: &'a Row,
    #[serde(skip)]
    pub index: usize,
    pub score: f32,
}

/// What an update did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpdateReport {
    /// Rows whose text was embedded now.
    pub embedded: usize,
    /// Rows whose vector came from the cache.
    pub reused: usize,
    /// Cached rows no longer present.
    pub dropped: usize,
    /// Why the cache could not be used, if it existed but was unusable.
    pub rebuilt: Option<String>,
    pub stats: EmbedStats,
    /// Keys of the rows embedded now, in item order.
    #[serde(skip)]
    pub embedded_keys: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Embed(#[from] EmbedError),
    /// The OS error is in the message, not chained, so `{:#}` prints it once.
    #[error("{}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },
    #[error("{}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error("query vector has {got} dimensions, the index {want}")]
    QueryDim { got: usize, want: usize },
}

const FORMAT: u32 = 1;
const TENSOR: &str = "vectors";

#[derive(Serialize, Deserialize)]
struct Sidecar {
    format: u32,
    model_id: String,
    dim: usize,
    /// sha256 of the matrix bytes: ties the sidecar to its safetensors file.
    matrix_sha256: String,
    rows: Vec<Row>,
}

#[derive(Debug, Clone)]
pub struct VectorIndex {
    model_id: String,
    dim: usize,
    rows: Vec<Row>,
    /// Row-major `rows.len() × dim`.
    matrix: Vec<f32>,
}

pub fn text_hash(text: &str) -> String {
    hex::encode(&Sha256::digest(text.as_bytes())[..16])
}

fn matrix_bytes(m: &[f32]) -> Vec<u8> {
    m.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
}

/// Write `bytes` to `path` atomically ([`crate::fsutil::write_atomic`]).
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), IndexError> {
    crate::fsutil::write_atomic(path, bytes).map_err(|err| IndexError::Io {
        path: path.into(),
        err,
    })
}

/// An error when the index folder is a symbolic link: a link planted below a cache folder would
/// lead reads and writes anywhere.
fn refuse_linked_dir(dir: &Path, verb: &str) -> Result<(), IndexError> {
    crate::fsutil::refuse_link_to(dir, verb).map_err(|err| IndexError::Io {
        path: dir.into(),
        err,
    })
}

impl VectorIndex {
    /// The two files of the index of `model_id` under `dir`: (matrix, sidecar).
    pub fn files(dir: &Path, model_id: &str) -> (PathBuf, PathBuf) {
        (
            dir.join(format!("vectors-{model_id}.safetensors")),
            dir.join(format!("vectors-{model_id}.json")),
        )
    }

    pub fn model_id(&self) -> &str {
        &self.model_id
    }
    pub fn dim(&self) -> usize {
        self.dim
    }
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }
    pub fn vector(&self, i: usize) -> &[f32] {
        &self.matrix[i * self.dim..(i + 1) * self.dim]
    }

    /// An index from rows and their vectors (normalised here).
    pub fn from_parts(model_id: &str, dim: usize, rows: Vec<Row>, mut matrix: Vec<f32>) -> Self {
        assert_eq!(
            rows.len() * dim,
            matrix.len(),
            "matrix size must be rows × dim"
        );
        if dim > 0 {
            matrix.chunks_mut(dim).for_each(normalize);
        }
        Self {
            model_id: model_id.into(),
            dim,
            rows,
            matrix,
        }
    }

    /// Load the cached index of `model_id` from `dir`. `Ok(None)` when there is none; an
    /// error when it exists but is unreadable, corrupt, or does not match `dim`.
    pub fn load(dir: &Path, model_id: &str, dim: usize) -> Result<Option<Self>, IndexError> {
        let (mat_path, side_path) = Self::files(dir, model_id);
        if !side_path.exists() && !mat_path.exists() {
            return Ok(None);
        }
        let read = |p: &Path| {
            crate::fsutil::read_no_follow(p).map_err(|err| IndexError::Io {
                path: p.into(),
                err,
            })
        };
        refuse_linked_dir(dir, "read")?;
        let side = read(&side_path)?;
        let matrix = read(&mat_path)?;
        Self::from_bytes(
            (side_path.as_path(), &side[..]),
            (mat_path.as_path(), &matrix[..]),
            model_id,
            dim,
        )
        .map(Some)
    }

    /// The index from the bytes of its two files, `(path, bytes)` of the sidecar and of the
    /// matrix, checked as [`VectorIndex::load`] checks them.
    pub fn from_bytes(
        (side_path, side): (&Path, &[u8]),
        (mat_path, bytes): (&Path, &[u8]),
        model_id: &str,
        dim: usize,
    ) -> Result<Self, IndexError> {
        let corrupt = |path: &Path, reason: String| IndexError::Corrupt {
            path: path.into(),
            reason,
        };
        let side: Sidecar = serde_json::from_slice(side)
            .map_err(|e| corrupt(side_path, format!("unreadable sidecar: {e}")))?;
        if side.format != FORMAT || side.model_id != model_id || side.dim != dim {
            return Err(corrupt(
                side_path,
                format!(
                    "written for format {} / model {} / {} dimensions, expected {FORMAT} / {model_id} / {dim}",
                    side.format, side.model_id, side.dim
                ),
            ));
        }
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| corrupt(mat_path, format!("not a valid safetensors file: {e}")))?;
        let view = st
            .tensor(TENSOR)
            .map_err(|e| corrupt(mat_path, format!("no `{TENSOR}` tensor: {e}")))?;
        let n = side.rows.len();
        if view.dtype() != safetensors::Dtype::F32 || view.shape() != [n, dim] {
            return Err(corrupt(
                mat_path,
                format!(
                    "`{TENSOR}` is {:?} {:?}, the sidecar lists {n} rows of {dim}",
                    view.dtype(),
                    view.shape()
                ),
            ));
        }
        if hex::encode(Sha256::digest(view.data())) != side.matrix_sha256 {
            return Err(corrupt(
                mat_path,
                "does not match its sidecar (checksum)".into(),
            ));
        }
        let matrix: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if matrix.iter().any(|x| !x.is_finite()) {
            return Err(corrupt(mat_path, "holds non-finite values".into()));
        }
        Ok(Self {
            model_id: model_id.into(),
            dim,
            rows: side.rows,
            matrix,
        })
    }

    /// Write both files atomically (matrix first; the sidecar's checksum binds them).
    pub fn save(&self, dir: &Path) -> Result<(), IndexError> {
        refuse_linked_dir(dir, "write")?;
        let (mat_path, side_path) = Self::files(dir, &self.model_id);
        let data = matrix_bytes(&self.matrix);
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            vec![self.rows.len(), self.dim],
            &data,
        )
        .map_err(|e| IndexError::Corrupt {
            path: mat_path.clone(),
            reason: e.to_string(),
        })?;
        let bytes = safetensors::tensor::serialize([(TENSOR, view)], None).map_err(|e| {
            IndexError::Corrupt {
                path: mat_path.clone(),
                reason: e.to_string(),
            }
        })?;
        write_atomic(&mat_path, &bytes)?;
        let side = Sidecar {
            format: FORMAT,
            model_id: self.model_id.clone(),
            dim: self.dim,
            matrix_sha256: hex::encode(Sha256::digest(&data)),
            rows: self.rows.clone(),
        };
        let json = serde_json::to_vec(&side).map_err(|e| IndexError::Corrupt {
            path: side_path.clone(),
            reason: e.to_string(),
        })?;
        write_atomic(&side_path, &json)
    }

    /// Bring the cached index in `dir` up to date with `items`: reuse every cached vector whose
    /// text hash is unchanged, embed the rest, drop rows no longer present, save if anything
    /// changed. Rows come out in `items` order.
    pub fn update(
        dir: &Path,
        embedder: &dyn Embedder,
        items: &[Item],
    ) -> Result<(Self, UpdateReport), IndexError> {
        let info = embedder.info();
        let (id, dim) = (info.id.clone(), info.dim);
        let mut report = UpdateReport::default();
        let old = match Self::load(dir, &id, dim) {
            Ok(old) => old,
            Err(IndexError::Embed(e)) => return Err(e.into()),
            Err(e) => {
                report.rebuilt = Some(e.to_string());
                None
            }
        };
        let cached: HashMap<&str, usize> = old
            .as_ref()
            .map(|o| {
                o.rows
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.hash.as_str(), i))
                    .collect()
            })
            .unwrap_or_default();
        let hashes: Vec<String> = items.par_iter().map(|it| text_hash(&it.text)).collect();
        // Texts to embed, each distinct text once.
        let mut todo: Vec<usize> = Vec::new();
        let mut todo_of_hash: HashMap<&str, usize> = HashMap::new();
        for (i, h) in hashes.iter().enumerate() {
            if !cached.contains_key(h.as_str()) && !todo_of_hash.contains_key(h.as_str()) {
                todo_of_hash.insert(h, todo.len());
                todo.push(i);
            }
        }
        let texts: Vec<&str> = todo.iter().map(|&i| items[i].text.as_str()).collect();
        let fresh = if texts.is_empty() {
            None
        } else {
            Some(embedder.embed(&texts, TextKind::Document)?)
        };
        let mut matrix = Vec::with_capacity(items.len() * dim);
        let mut rows = Vec::with_capacity(items.len());
        for (item, hash) in items.iter().zip(&hashes) {
            match (cached.get(hash.as_str()), &old) {
                (Some(&r), Some(o)) => {
                    matrix.extend_from_slice(o.vector(r));
                    report.reused += 1;
                }
                _ => {
                    let e = fresh.as_ref().ok_or_else(|| IndexError::Corrupt {
                        path: dir.into(),
                        reason: "internal: text to embed was not embedded".into(),
                    })?;
                    let mut v = e.row(todo_of_hash[hash.as_str()]).to_vec();
                    normalize(&mut v);
                    matrix.extend_from_slice(&v);
                    report.embedded += 1;
                    report.embedded_keys.push(item.key.clone());
                }
            }
            rows.push(Row {
                key: item.key.clone(),
                qualname: item.qualname.clone(),
                path: item.path.clone(),
                start_line: item.start_line,
                hash: hash.clone(),
            });
        }
        if let Some(e) = &fresh {
            report.stats = e.stats.clone();
        }
        let index = Self {
            model_id: id,
            dim,
            rows,
            matrix,
        };
        let unchanged = old.as_ref().is_some_and(|o| o.rows == index.rows);
        if let Some(o) = &old {
            let kept: std::collections::HashSet<&str> =
                index.rows.iter().map(|r| r.hash.as_str()).collect();
            report.dropped = o
                .rows
                .iter()
                .filter(|r| !kept.contains(r.hash.as_str()))
                .count();
        }
        if !unchanged {
            index.save(dir)?;
        }
        Ok((index, report))
    }

    /// Cosine similarities of all rows to `query` (normalised here), one product per row.
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>, IndexError> {
        if query.len() != self.dim {
            return Err(IndexError::QueryDim {
                got: query.len(),
                want: self.dim,
            });
        }
        let mut q = query.to_vec();
        normalize(&mut q);
        if self.dim == 0 {
            return Ok(vec![0.0; self.rows.len()]);
        }
        Ok(self
            .matrix
            .par_chunks(self.dim)
            .with_min_len(1024)
            .map(|row| dot(row, &q))
            .collect())
    }

    /// The `k` rows most similar to `query` among those `visible` accepts, best first (ties by
    /// row order).
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        visible: &dyn Fn(&Row) -> bool,
    ) -> Result<Vec<Hit<'_>>, IndexError> {
        let scores = self.scores(query)?;
        let mut cand: Vec<(f32, usize)> = scores
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| visible(&self.rows[i]))
            .map(|(i, s)| (s, i))
            .collect();
        let better = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if k < cand.len() {
            if k == 0 {
                return Ok(Vec::new());
            }
            cand.select_nth_unstable_by(k - 1, better);
            cand.truncate(k);
        }
        cand.sort_unstable_by(better);
        Ok(cand
            .into_iter()
            .map(|(score, index)| Hit {
                row: &self.rows[index],
                index,
                score,
            })
            .collect())
    }
}

/// Dot product with independent accumulators so the compiler vectorises it (the cosine of two
/// normalised vectors).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..16 {
            acc[j] += x[j] * y[j];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize) -> Row {
        Row {
            key: format!("k{i}"),
            qualname: format!("f{i}"),
            path: "a.py".into(),
            start_line: i as u32,
            hash: format!("h{i}"),
        }
    }

    #[test]
    fn search_ranks_filters_and_roundtrips() {
        let m = vec![1.0, 0.0, 0.6, 0.8, 0.0, 1.0, -1.0, 0.0];
        let idx = VectorIndex::from_parts("m", 2, (0..4).map(row).collect(), m);
        let all = |_: &Row| true;
        let hits = idx.search(&[2.0, 0.0], 3, &all).unwrap();
        let order: Vec<usize> = hits.iter().map(|h| h.index).collect();
        assert_eq!(order, vec![0, 1, 2]);
        assert!((hits[1].score - 0.6).abs() < 1e-6);
        let hide0 = |r: &Row| r.key != "k0";
        let hits = idx.search(&[1.0, 0.0], 10, &hide0).unwrap();
        assert_eq!(
            hits.iter().map(|h| h.index).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert!(idx.search(&[1.0], 1, &all).is_err());

        let dir = tempfile::tempdir().unwrap();
        idx.save(dir.path()).unwrap();
        let back = VectorIndex::load(dir.path(), "m", 2).unwrap().unwrap();
        assert_eq!(back.rows(), idx.rows());
        assert_eq!(back.matrix, idx.matrix);
        assert!(matches!(
            VectorIndex::load(dir.path(), "m", 3),
            Err(IndexError::Corrupt { .. })
        ));
        assert!(VectorIndex::load(dir.path(), "other", 2).unwrap().is_none());
    }

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.1).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }
}
