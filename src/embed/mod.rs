//! Dense text embeddings computed natively through candle.
//!
//! [`load`] resolves a model name (built-in alias, local directory, or Hugging Face repo id) and
//! returns an [`Embedder`]. Each architecture family has its own network file (`bert.rs` for
//! BERT/RoBERTa encoders, `qwen3.rs` for Qwen3-Embedding); tokenization, length-sorted
//! token-budget batching, pooling and normalisation are shared (`batch.rs`, `settings.rs`).

mod batch;
mod bert;
mod fused;
pub(crate) mod kernels;
mod ops;
mod qwen3;
pub mod resolve;
pub mod settings;
pub mod text;
mod weights;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde::Serialize;

pub use resolve::{resolve, ModelDir};
pub use settings::{Pooling, Settings};

/// Everything that can go wrong loading or running an embedding model.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error("embedding model `{name}` not found: {hint}")]
    ModelNotFound { name: String, hint: String },
    #[error("{}: missing ({what})", path.display())]
    MissingFile { path: PathBuf, what: String },
    #[error("{}: {reason}", path.display())]
    BadFile { path: PathBuf, reason: String },
    #[error("model {model}: architecture `{model_type}` is not supported (supported: bert, roberta, xlm-roberta, qwen3)")]
    Unsupported { model: String, model_type: String },
    #[error("model {model}: tokenizer.json has {tokenizer} tokens but the embedding matrix has {rows} rows; the tokenizer does not belong to these weights")]
    TokenizerMismatch {
        model: String,
        tokenizer: usize,
        rows: usize,
    },
    #[error("text #{index} is empty or only whitespace: there is nothing to embed")]
    EmptyText { index: usize },
    #[error("model {model}: tokenizing text #{index} failed: {reason}")]
    Tokenize {
        model: String,
        index: usize,
        reason: String,
    },
    #[error("device `{spec}`: {reason}")]
    Device { spec: String, reason: String },
    /// candle's error is in the message, not chained, so `{:#}` prints it once.
    #[error("model {model}: {err}")]
    Candle {
        model: String,
        err: candle_core::Error,
    },
}

/// Whether a text is a document (indexed code) or a query; only queries get the model's
/// query prompt (e.g. Qwen3-Embedding's instruction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    Document,
    Query,
}

/// What identifies a loaded model (for cache keys and reports).
#[derive(Debug, Clone, Serialize)]
pub struct ModelInfo {
    /// The name it was loaded by (alias, directory, or repo id).
    pub name: String,
    /// A stable identifier of the weights and settings: changes when they change.
    pub id: String,
    pub architecture: String,
    pub dim: usize,
    /// Longest input in tokens (special tokens included); longer inputs are truncated.
    pub max_tokens: usize,
    pub pooling: Pooling,
    pub normalize: bool,
}

/// Counters of one embedding call.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct EmbedStats {
    pub texts: usize,
    /// Real tokens fed to the network (after truncation).
    pub tokens: usize,
    /// Tokens including padding (what the network computed).
    pub padded_tokens: usize,
    pub batches: usize,
    /// Inputs longer than `max_tokens` that were cut.
    pub truncated: usize,
}

impl EmbedStats {
    pub fn add(&mut self, other: &EmbedStats) {
        self.texts += other.texts;
        self.tokens += other.tokens;
        self.padded_tokens += other.padded_tokens;
        self.batches += other.batches;
        self.truncated += other.truncated;
    }
}

/// Embeddings of several texts: row `i` (length `dim`) belongs to text `i`.
#[derive(Debug, Clone)]
pub struct Embeddings {
    pub dim: usize,
    pub data: Vec<f32>,
    pub stats: EmbedStats,
}

impl Embeddings {
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// A text embedding model. Implementations batch internally; callers pass all their texts.
pub trait Embedder: Send + Sync {
    fn info(&self) -> &ModelInfo;
    /// Embed `texts` in order. Empty or whitespace-only texts are an error
    /// ([`EmbedError::EmptyText`]), never a zero vector.
    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Embeddings, EmbedError>;
}

/// Which network a model directory holds.
enum Network {
    Bert(bert::Bert),
    Qwen3(qwen3::Qwen3),
}

/// An embedding model running locally through candle.
pub struct LocalEmbedder {
    info: ModelInfo,
    settings: Settings,
    tokenizer: tokenizers::Tokenizer,
    network: Network,
    device: Device,
    token_budget: usize,
}

/// The embedder used when none is named.
pub const DEFAULT_MODEL: &str = crate::models::DEFAULT_EMBEDDER;

/// Padded tokens per forward pass on `device`: bounds the attention scores (budget × heads ×
/// length floats) and the activations. On the CPU 2,048 measured fastest (`bench embed` on
/// boltons, single runs against 2,048 on the same build: 1,024 0.76×, 4,096 0.91×, 8,192
/// 0.82×): one layer's activations then stay a few megabytes, which the allocator reuses,
/// where larger ones come as fresh pages every time.
/// Other devices keep the larger batches they were measured with.
pub fn default_token_budget(device: &Device) -> usize {
    if device.is_cpu() {
        2048
    } else {
        8192
    }
}

/// Parse `cpu`, `cuda` or `cuda:N`. CUDA needs a build with the `cuda` feature.
pub fn parse_device(spec: &str) -> Result<Device, EmbedError> {
    let err = |reason: &str| EmbedError::Device {
        spec: spec.to_string(),
        reason: reason.to_string(),
    };
    if spec == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = match spec.strip_prefix("cuda") {
        Some("") => 0,
        Some(rest) => rest
            .strip_prefix(':')
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| err("expected `cpu`, `cuda` or `cuda:N`"))?,
        None => return Err(err("expected `cpu`, `cuda` or `cuda:N`")),
    };
    if !cfg!(feature = "cuda") {
        return Err(err(
            "this repohop was built without CUDA; rebuild with `cargo build --release --features cuda`",
        ));
    }
    crate::gpu::open_cuda(ordinal).map_err(|e| err(&e.to_string()))
}

/// Resolve `name` (alias, directory, or Hugging Face repo id) and load it on `device`.
pub fn load(name: &str, device: &Device) -> Result<LocalEmbedder, EmbedError> {
    let dir = resolve(name)?;
    LocalEmbedder::from_dir(&dir, device)
}

/// The network `config.json` (`config_text`) describes, over `weights`: (network, hidden
/// size, embedding rows).
fn network(
    family: &str,
    config_path: &Path,
    config_text: &str,
    weights: &weights::Weights,
) -> Result<(Network, usize, usize), EmbedError> {
    Ok(match family {
        "bert" => {
            let net = bert::Bert::load(config_path, config_text, weights)?;
            let (d, r) = (net.hidden_size(), net.vocab_rows());
            (Network::Bert(net), d, r)
        }
        _ => {
            let net = qwen3::Qwen3::load(config_path, config_text, weights)?;
            let (d, r) = (net.hidden_size(), net.vocab_rows());
            (Network::Qwen3(net), d, r)
        }
    })
}

/// Loads the network of `config_text` over the safetensors `weights` as
/// [`LocalEmbedder::from_dir`] does, and runs it on one sequence of `ids`: the fuzz target of
/// the embedders' loader. Returns the hidden size.
#[doc(hidden)]
pub fn network_from_bytes(
    config_text: &str,
    weights: &[u8],
    ids: &[u32],
    device: &Device,
) -> Result<usize, EmbedError> {
    let config_path = Path::new("config.json");
    let config: serde_json::Value =
        serde_json::from_str(config_text).map_err(|e| EmbedError::BadFile {
            path: config_path.into(),
            reason: format!("not valid JSON: {e}"),
        })?;
    let family = match config["model_type"].as_str() {
        Some("qwen3") => "qwen3",
        _ => "bert",
    };
    let weights = weights::Weights::from_bytes(Path::new("model.safetensors"), weights, device)?;
    let (network, dim, rows) = network(family, config_path, config_text, &weights)?;
    if ids.is_empty() || ids.iter().any(|&i| i as usize >= rows) {
        return Ok(dim);
    }
    let map = |err| EmbedError::Candle {
        model: "fuzz".into(),
        err,
    };
    let l = ids.len();
    let ids_t = Tensor::from_slice(ids, (1, l), device).map_err(map)?;
    let real = vec![true; l];
    let mask = Tensor::ones((1, l), DType::F32, device).map_err(map)?;
    match &network {
        Network::Bert(net) => net.forward(&ids_t, &mask, &real),
        Network::Qwen3(net) => net.forward(&ids_t, &mask, &real),
    }
    .map_err(map)?;
    Ok(dim)
}

impl LocalEmbedder {
    pub fn from_dir(dir: &ModelDir, device: &Device) -> Result<Self, EmbedError> {
        let config_path = dir.path.join("config.json");
        let config_text = std::fs::read_to_string(&config_path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => EmbedError::MissingFile {
                path: config_path.clone(),
                what: "every model directory needs config.json".into(),
            },
            _ => EmbedError::BadFile {
                path: config_path.clone(),
                reason: e.to_string(),
            },
        })?;
        let config: serde_json::Value =
            serde_json::from_str(&config_text).map_err(|e| EmbedError::BadFile {
                path: config_path.clone(),
                reason: format!("not valid JSON: {e}"),
            })?;
        let model_type = config["model_type"].as_str().unwrap_or("").to_string();
        let family = match model_type.as_str() {
            "bert" | "roberta" | "xlm-roberta" | "camembert" => "bert",
            "qwen3" => "qwen3",
            _ => {
                return Err(EmbedError::Unsupported {
                    model: dir.name.clone(),
                    model_type,
                })
            }
        };
        let settings = Settings::read(dir, family, &config)?;
        let weights = weights::Weights::read(&dir.path.join("model.safetensors"), device)?;
        let (network, dim, rows) = network(family, &config_path, &config_text, &weights)?;
        let max_tokens = match &network {
            Network::Bert(b) => settings.max_tokens.min(b.max_positions()),
            Network::Qwen3(_) => settings.max_tokens,
        };
        let tokenizer = batch::load_tokenizer(&dir.path.join("tokenizer.json"), max_tokens)?;
        let vocab = tokenizer.get_vocab_size(true);
        if vocab > rows {
            return Err(EmbedError::TokenizerMismatch {
                model: dir.name.clone(),
                tokenizer: vocab,
                rows,
            });
        }
        let info = ModelInfo {
            name: dir.name.clone(),
            id: settings.fingerprint(dir, &config_text),
            architecture: model_type,
            dim,
            max_tokens,
            pooling: settings.pooling,
            normalize: settings.normalize,
        };
        Ok(Self {
            info,
            settings,
            tokenizer,
            network,
            device: device.clone(),
            token_budget: default_token_budget(device),
        })
    }

    /// Change how many padded tokens go through the network at once (at least one sequence).
    pub fn set_token_budget(&mut self, budget: usize) {
        self.token_budget = budget.max(1);
    }

    fn candle(&self) -> impl Fn(candle_core::Error) -> EmbedError + '_ {
        |err| EmbedError::Candle {
            model: self.info.name.clone(),
            err,
        }
    }

    /// Run one padded batch and return its pooled (and, per settings, normalised) vectors.
    fn run_batch(&self, batch: &batch::Batch) -> Result<Vec<f32>, EmbedError> {
        let map = self.candle();
        let (b, l) = (batch.rows, batch.len);
        let ids = Tensor::from_slice(&batch.ids, (b, l), &self.device).map_err(&map)?;
        let mask_f: Vec<f32> = batch.mask.iter().map(|&m| m as u8 as f32).collect();
        let mask = Tensor::from_slice(&mask_f, (b, l), &self.device).map_err(&map)?;
        let hidden = match &self.network {
            Network::Bert(net) => net.forward(&ids, &mask, &batch.mask),
            Network::Qwen3(net) => net.forward(&ids, &mask, &batch.mask),
        }
        .map_err(&map)?;
        let pooled = settings::pool(&hidden, &mask, self.settings.pooling).map_err(&map)?;
        let pooled = if self.settings.normalize {
            ops::l2_normalize_rows(&pooled).map_err(&map)?
        } else {
            pooled
        };
        pooled
            .to_dtype(DType::F32)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<f32>())
            .map_err(&map)
    }
}

impl Embedder for LocalEmbedder {
    fn info(&self) -> &ModelInfo {
        &self.info
    }

    fn embed(&self, texts: &[&str], kind: TextKind) -> Result<Embeddings, EmbedError> {
        if let Some(index) = texts.iter().position(|t| t.trim().is_empty()) {
            return Err(EmbedError::EmptyText { index });
        }
        let prompt = match kind {
            TextKind::Query => self.settings.query_prompt.as_deref(),
            TextKind::Document => self.settings.document_prompt.as_deref(),
        };
        let tokenized = batch::tokenize(&self.tokenizer, &self.info.name, texts, prompt)?;
        let pad_id = self.settings.pad_id;
        let plan = batch::plan(&tokenized, self.token_budget);
        let dim = self.info.dim;
        let mut data = vec![0f32; texts.len() * dim];
        let mut stats = EmbedStats {
            texts: texts.len(),
            truncated: tokenized.iter().filter(|t| t.truncated).count(),
            tokens: tokenized.iter().map(|t| t.ids.len()).sum(),
            ..EmbedStats::default()
        };
        for members in &plan {
            let batch = batch::Batch::pack(&tokenized, members, pad_id, self.settings.left_pad);
            stats.batches += 1;
            stats.padded_tokens += batch.rows * batch.len;
            let vectors = self.run_batch(&batch)?;
            for (row, &text) in members.iter().enumerate() {
                data[text * dim..(text + 1) * dim]
                    .copy_from_slice(&vectors[row * dim..(row + 1) * dim]);
            }
        }
        Ok(Embeddings { dim, data, stats })
    }
}
