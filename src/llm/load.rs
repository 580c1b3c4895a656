//! Model resolution (alias, local path, hf-hub cache) and the checks made before loading:
//! a GGUF must be complete, a tokenizer must fit the model.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file;

use super::LlmError;

/// The files of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelFiles {
    Gguf {
        model: PathBuf,
        tokenizer: PathBuf,
    },
    Safetensors {
        config: PathBuf,
        weights: Vec<PathBuf>,
        tokenizer: PathBuf,
    },
}

impl ModelFiles {
    pub fn tokenizer(&self) -> &Path {
        match self {
            ModelFiles::Gguf { tokenizer, .. } | ModelFiles::Safetensors { tokenizer, .. } => {
                tokenizer
            }
        }
    }
}

fn not_found(name: &str, hint: impl Into<String>) -> LlmError {
    LlmError::ModelNotFound {
        name: name.to_string(),
        hint: hint.into(),
    }
}

fn require(path: PathBuf, name: &str) -> Result<PathBuf, LlmError> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(not_found(name, format!("{} is missing", path.display())))
    }
}

/// Files of a folder holding `model.gguf` or `*.safetensors` + `config.json`, with `tokenizer.json`.
fn from_dir(dir: &Path, name: &str) -> Result<ModelFiles, LlmError> {
    // The tokenizer is checked at load time, after the model's architecture.
    let tokenizer = dir.join("tokenizer.json");
    let gguf = dir.join("model.gguf");
    if gguf.is_file() {
        return Ok(ModelFiles::Gguf {
            model: gguf,
            tokenizer,
        });
    }
    let config = require(dir.join("config.json"), name)?;
    let mut weights: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| not_found(name, format!("cannot list {}: {e}", dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    weights.sort();
    if weights.is_empty() {
        return Err(not_found(
            name,
            format!(
                "{} holds neither model.gguf nor *.safetensors",
                dir.display()
            ),
        ));
    }
    Ok(ModelFiles::Safetensors {
        config,
        weights,
        tokenizer,
    })
}

/// Resolves `name`: a built-in alias (see `repohop models list`; fetched if missing), a path to a `.gguf` file
/// (with `tokenizer.json` beside it) or to a model folder, or a Hugging Face repo id already in
/// the local hf-hub cache (offline; never downloads).
pub fn resolve(name: &str) -> Result<ModelFiles, LlmError> {
    if crate::models::spec(name).is_some() {
        // A missing built-in model is fetched once, with progress on stderr.
        let dir = crate::models::ensure(name).map_err(|e| not_found(name, e.to_string()))?;
        return from_dir(&dir, name);
    }
    let path = Path::new(name);
    if path.is_file() {
        return Ok(ModelFiles::Gguf {
            model: path.to_path_buf(),
            tokenizer: path.with_file_name("tokenizer.json"),
        });
    }
    if path.is_dir() {
        return from_dir(path, name);
    }
    let looks_like_path = name.starts_with(['/', '.', '~']) || name.ends_with(".gguf");
    if looks_like_path {
        return Err(not_found(name, "no such file or folder"));
    }
    let parts: Vec<&str> = name.split('/').collect();
    if parts.len() == 2 && parts.iter().all(|p| !p.is_empty()) {
        let repo = hf_hub::Cache::from_env().model(name.to_string());
        let get = |f: &str| {
            repo.get(f).ok_or_else(|| {
                not_found(name, format!("{f} is not in the local Hugging Face cache"))
            })
        };
        let tokenizer = get("tokenizer.json")?;
        let config = get("config.json")?;
        let weights = match repo.get("model.safetensors") {
            Some(w) => vec![w],
            None => {
                let index = get("model.safetensors.index.json")?;
                let text = std::fs::read_to_string(&index)
                    .map_err(|e| not_found(name, format!("{}: {e}", index.display())))?;
                let json: serde_json::Value = serde_json::from_str(&text)
                    .map_err(|e| not_found(name, format!("{}: {e}", index.display())))?;
                let mut files: Vec<String> = json["weight_map"]
                    .as_object()
                    .map(|m| {
                        m.values()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                files.sort();
                files.dedup();
                files.iter().map(|f| get(f)).collect::<Result<_, _>>()?
            }
        };
        return Ok(ModelFiles::Safetensors {
            config,
            weights,
            tokenizer,
        });
    }
    let aliases: Vec<&str> = crate::models::MODELS
        .iter()
        .filter(|m| m.kind == crate::models::ModelKind::Generator)
        .map(|m| m.alias)
        .collect();
    Err(not_found(
        name,
        format!(
            "not a built-in alias ({}), an existing path, or a cached Hugging Face repo id",
            aliases.join(", ")
        ),
    ))
}

/// Reads a GGUF header and checks every tensor it lists before anything reads one: its size
/// computes without overflow, it has elements (candle reads an empty tensor through a dangling
/// pointer), it fills whole quantization blocks, and the file holds it.
pub fn read_gguf<R: Read + Seek>(
    path: &Path,
    reader: &mut R,
) -> Result<gguf_file::Content, LlmError> {
    let bad = |reason: String| LlmError::Load {
        path: path.to_path_buf(),
        reason,
    };
    let io = |e: std::io::Error| bad(format!("cannot read the file ({e})"));
    let actual = reader.seek(SeekFrom::End(0)).map_err(io)?;
    reader.seek(SeekFrom::Start(0)).map_err(io)?;
    check_gguf_alignment(reader, actual).map_err(&bad)?;
    reader.seek(SeekFrom::Start(0)).map_err(io)?;
    let content = gguf_file::Content::read(reader)
        .map_err(|e| bad(format!("not a readable GGUF file ({e})")))?;
    let mut expected = content.tensor_data_offset;
    for (name, t) in &content.tensor_infos {
        let dims = t.shape.dims();
        let elems = dims
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| {
                bad(format!(
                    "tensor {name} has shape {dims:?}: too many elements"
                ))
            })?;
        if elems == 0 {
            return Err(bad(format!(
                "tensor {name} has shape {dims:?}: no elements"
            )));
        }
        let (block, block_bytes) = (t.ggml_dtype.block_size(), t.ggml_dtype.type_size());
        if !elems.is_multiple_of(block) {
            return Err(bad(format!(
                "tensor {name} has {elems} elements, not whole blocks of {block} ({:?})",
                t.ggml_dtype
            )));
        }
        let end = ((elems / block) as u64)
            .checked_mul(block_bytes as u64)
            .and_then(|bytes| bytes.checked_add(t.offset))
            .and_then(|end| end.checked_add(content.tensor_data_offset))
            .ok_or_else(|| {
                bad(format!(
                    "tensor {name} (offset {}, shape {dims:?}) ends past any file size",
                    t.offset
                ))
            })?;
        expected = expected.max(end);
    }
    if actual < expected {
        return Err(LlmError::Truncated {
            path: path.to_path_buf(),
            expected,
            actual,
        });
    }
    Ok(content)
}

/// Refuses a GGUF whose `general.alignment` is 0: candle divides by it while reading the
/// header. Walks the metadata as candle does, skipping values by seeking (nothing is allocated
/// from a length in the file); anything malformed is left for candle's reader to report.
fn check_gguf_alignment<R: Read + Seek>(r: &mut R, file_len: u64) -> Result<(), String> {
    const KEY: &[u8] = b"general.alignment";
    let Ok(Some(zero)) = find_zero_alignment(r, file_len, KEY) else {
        return Ok(());
    };
    Err(format!(
        "general.alignment is {zero}: tensor data cannot be aligned to it"
    ))
}

fn read_le<R: Read, const N: usize>(r: &mut R) -> std::io::Result<[u8; N]> {
    let mut b = [0u8; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

/// `Ok(Some(0))` when the metadata sets `key` to an integer 0 of a type candle reads as the
/// alignment; `Ok(None)` otherwise; `Err` on a malformed header.
fn find_zero_alignment<R: Read + Seek>(
    r: &mut R,
    file_len: u64,
    key: &[u8],
) -> std::io::Result<Option<u64>> {
    let malformed = || std::io::Error::from(std::io::ErrorKind::InvalidData);
    let magic = u32::from_le_bytes(read_le(r)?);
    let version = u32::from_le_bytes(read_le(r)?);
    if !matches!(magic, 0x4655_4747 | 0x4747_5546) || !(1..=3).contains(&version) {
        return Err(malformed());
    }
    let wide = version > 1;
    let _tensors = read_len(r, wide)?;
    let kvs = read_len(r, wide)?;
    for _ in 0..kvs {
        let n = read_len(r, wide)?;
        let is_key = if n == key.len() as u64 {
            let mut name = vec![0u8; key.len()];
            r.read_exact(&mut name)?;
            name == key
        } else {
            skip(r, n, file_len)?;
            false
        };
        let ty = u32::from_le_bytes(read_le(r)?);
        if is_key {
            // The integer types candle takes the alignment from (see `Content::read`).
            let value = match ty {
                0 | 1 => u64::from(read_le::<R, 1>(r)?[0]),
                2 | 3 => u64::from(u16::from_le_bytes(read_le(r)?)),
                4 | 5 => u64::from(u32::from_le_bytes(read_le(r)?)),
                _ => 1,
            };
            return Ok((value == 0).then_some(0));
        }
        skip_value(r, ty, wide, file_len, 0)?;
    }
    Ok(None)
}

/// A GGUF length: 32 bits in version 1, 64 after.
fn read_len<R: Read>(r: &mut R, wide: bool) -> std::io::Result<u64> {
    if wide {
        Ok(u64::from_le_bytes(read_le(r)?))
    } else {
        Ok(u64::from(u32::from_le_bytes(read_le(r)?)))
    }
}

/// Seeks past `n` bytes, refusing to go beyond the end of the file.
fn skip<R: Seek>(r: &mut R, n: u64, file_len: u64) -> std::io::Result<()> {
    let at = r.stream_position()?;
    match at.checked_add(n) {
        Some(end) if end <= file_len => r.seek(SeekFrom::Start(end)).map(|_| ()),
        _ => Err(std::io::ErrorKind::UnexpectedEof.into()),
    }
}

fn skip_value<R: Read + Seek>(
    r: &mut R,
    ty: u32,
    wide: bool,
    file_len: u64,
    depth: usize,
) -> std::io::Result<()> {
    let fixed = |ty: u32| match ty {
        0 | 1 | 7 => Some(1u64),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    };
    if let Some(size) = fixed(ty) {
        return skip(r, size, file_len);
    }
    match ty {
        8 => {
            let n = read_len(r, wide)?;
            skip(r, n, file_len)
        }
        9 if depth < 64 => {
            let item = u32::from_le_bytes(read_le(r)?);
            let count = read_len(r, wide)?;
            if let Some(size) = fixed(item) {
                let bytes = count
                    .checked_mul(size)
                    .ok_or(std::io::ErrorKind::InvalidData)?;
                return skip(r, bytes, file_len);
            }
            for _ in 0..count {
                skip_value(r, item, wide, file_len, depth + 1)?;
            }
            Ok(())
        }
        _ => Err(std::io::ErrorKind::InvalidData.into()),
    }
}

/// Reads `tokenizer.json`: the one way every tokenizer (the generator's and the embedders') is
/// loaded.
pub fn read_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer, LlmError> {
    let bytes = std::fs::read(path).map_err(|e| LlmError::Load {
        path: path.to_path_buf(),
        reason: format!("cannot read the tokenizer ({e})"),
    })?;
    tokenizer_from_bytes(path, &bytes)
}

/// [`read_tokenizer`] of the file's bytes; `path` names it in errors. Besides what the
/// tokenizers crate checks, refuses the parts it accepts and then panics on when encoding or
/// decoding (see [`check_tokenizer_json`]).
pub fn tokenizer_from_bytes(path: &Path, bytes: &[u8]) -> Result<tokenizers::Tokenizer, LlmError> {
    let bad = |reason: String| LlmError::Load {
        path: path.to_path_buf(),
        reason,
    };
    let json: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not a tokenizer.json ({e})")))?;
    check_tokenizer_json(&json).map_err(|e| bad(format!("unusable tokenizer.json: {e}")))?;
    tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| bad(format!("not a tokenizer.json ({e})")))
}

/// What the tokenizers crate (0.22) loads but panics on later: a `Strip` decoder that strips
/// characters from the end (it indexes before the start of a token shorter than `stop`), and
/// a `TemplateProcessing` post-processor whose templates name special tokens it does not
/// define, whose single-sequence template reads the pair's sequence, or whose special token
/// has a different number of ids and tokens. Sequences of decoders and post-processors are
/// checked member by member.
fn check_tokenizer_json(json: &serde_json::Value) -> Result<(), String> {
    check_decoder(&json["decoder"])?;
    check_post_processor(&json["post_processor"])
}

fn check_decoder(d: &serde_json::Value) -> Result<(), String> {
    // The library reads these by shape (an untagged enum), whatever their `type` says.
    if let Some(ds) = d["decoders"].as_array() {
        return ds.iter().try_for_each(check_decoder);
    }
    let strip = d.get("content").is_some() && d.get("start").is_some();
    if strip && d["stop"].as_u64().is_some_and(|n| n > 0) {
        return Err(format!(
            "its Strip decoder strips {} character(s) from the end of tokens, which the \
             tokenizers library cannot do safely",
            d["stop"]
        ));
    }
    Ok(())
}

fn check_post_processor(p: &serde_json::Value) -> Result<(), String> {
    if let Some(ps) = p["processors"].as_array() {
        return ps.iter().try_for_each(check_post_processor);
    }
    // By shape, as for decoders: a misspelt `type` is still read as a template.
    let template = ["single", "pair", "special_tokens"]
        .iter()
        .any(|k| p.get(k).is_some());
    if !template {
        return Ok(());
    }
    let specials = p["special_tokens"].as_object();
    for (id, t) in specials.into_iter().flatten() {
        let (ids, tokens) = (t["ids"].as_array(), t["tokens"].as_array());
        if ids.map(Vec::len) != tokens.map(Vec::len) {
            return Err(format!(
                "its template's special token {id:?} has a different number of ids \
                         and tokens"
            ));
        }
    }
    for (template, single) in [("single", true), ("pair", false)] {
        for piece in p[template].as_array().into_iter().flatten() {
            if let Some(id) = piece["SpecialToken"]["id"].as_str() {
                if !specials.is_some_and(|s| s.contains_key(id)) {
                    return Err(format!(
                        "its {template} template uses the special token {id:?}, which \
                                 it does not define"
                    ));
                }
            }
            if single && piece["Sequence"]["id"].as_str() == Some("B") {
                return Err(
                    "its single-sequence template reads the second sequence of a pair".into(),
                );
            }
        }
    }
    Ok(())
}

/// Loads a tokenizer and checks it belongs to a Qwen model of `vocab_size` tokens.
pub(crate) fn load_tokenizer(
    path: &Path,
    vocab_size: usize,
) -> Result<tokenizers::Tokenizer, LlmError> {
    if !path.is_file() {
        return Err(LlmError::Load {
            path: path.to_path_buf(),
            reason: "tokenizer.json is missing; put the model's tokenizer.json beside it".into(),
        });
    }
    let tok = read_tokenizer(path)?;
    let mismatch = |reason: String| LlmError::TokenizerMismatch {
        path: path.to_path_buf(),
        reason,
    };
    let n = tok.get_vocab_size(true);
    if n > vocab_size {
        return Err(mismatch(format!(
            "it has {n} tokens but the model's vocabulary has {vocab_size}; use the model's own tokenizer.json"
        )));
    }
    if tok.token_to_id("<|endoftext|>").is_none() {
        return Err(mismatch(
            "it lacks <|endoftext|>, so it is not a Qwen tokenizer".into(),
        ));
    }
    Ok(tok)
}
