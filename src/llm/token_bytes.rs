//! The bytes each token id decodes to, computed once per tokenizer, so decoding and
//! constrained decoding work on exact bytes (a token may hold part of a UTF-8 character).

use std::collections::HashMap;

use tokenizers::{DecoderWrapper, Tokenizer};

pub struct TokenBytes {
    bytes: Vec<Vec<u8>>,
    /// Control tokens: the special added tokens (`<|im_end|>`, `<|endoftext|>`, ...) and the
    /// added `<|...|>` markers (see [`is_marker`]). They end generation and are never text.
    special: Vec<bool>,
}

/// GPT-2 byte-level alphabet: the printable character standing for each byte.
fn byte_level_decoder() -> HashMap<char, u8> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut map = HashMap::with_capacity(256);
    let mut extra = 0u32;
    for b in 0u32..256 {
        let c = if printable.contains(&b) {
            b
        } else {
            extra += 1;
            255 + extra
        };
        if let Some(ch) = char::from_u32(c) {
            map.insert(ch, b as u8);
        }
    }
    map
}

/// An added token written `<|name|>`. Qwen2.5 leaves its repository and fill-in-the-middle
/// markers (`<|file_sep|>`, `<|fim_prefix|>`, `<|repo_name|>`, ...) unmarked as special, yet a
/// model that writes one has left the code it was asked for (an infilled body followed by
/// `<|file_sep|>` and the next file's path), so they end an answer like the special ones.
fn is_marker(content: &str) -> bool {
    content.len() > 4 && content.starts_with("<|") && content.ends_with("|>")
}

impl TokenBytes {
    /// Table for ids `0..vocab_size` (the model's vocabulary; ids the tokenizer lacks decode
    /// to nothing).
    pub fn new(tokenizer: &Tokenizer, vocab_size: usize) -> Self {
        let added = tokenizer.get_added_tokens_decoder();
        let byte_level = matches!(tokenizer.get_decoder(), Some(DecoderWrapper::ByteLevel(_)));
        let map = byte_level.then(byte_level_decoder);
        let mut bytes = Vec::with_capacity(vocab_size);
        let mut special = vec![false; vocab_size];
        for id in 0..vocab_size as u32 {
            if let Some(tok) = added.get(&id) {
                let control = tok.special || is_marker(&tok.content);
                special[id as usize] = control;
                bytes.push(if control {
                    Vec::new()
                } else {
                    tok.content.clone().into_bytes()
                });
                continue;
            }
            let b = match (&map, tokenizer.id_to_token(id)) {
                (Some(map), Some(s)) => {
                    let mut out = Vec::with_capacity(s.len());
                    for ch in s.chars() {
                        match map.get(&ch) {
                            Some(&b) => out.push(b),
                            None => out.extend_from_slice(ch.encode_utf8(&mut [0; 4]).as_bytes()),
                        }
                    }
                    out
                }
                (None, Some(_)) => tokenizer
                    .decode(&[id], false)
                    .unwrap_or_default()
                    .into_bytes(),
                (_, None) => Vec::new(),
            };
            bytes.push(b);
        }
        Self { bytes, special }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Decoded bytes of `id` (empty for special tokens and unknown ids).
    pub fn get(&self, id: u32) -> &[u8] {
        self.bytes
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::AddedToken;

    #[test]
    fn markers_end_an_answer_though_not_marked_special() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/llm/qwen2-gguf/tokenizer.json"
        );
        let mut tok = Tokenizer::from_file(path).unwrap();
        // As Qwen2.5's tokenizer lists them: special false.
        tok.add_tokens(&[
            AddedToken::from("<|file_sep|>", false),
            AddedToken::from("<tool_call>", false),
        ]);
        let id = |s: &str| tok.token_to_id(s).unwrap();
        let table = TokenBytes::new(&tok, tok.get_vocab_size(true));
        for marker in ["<|file_sep|>", "<|im_end|>"] {
            assert!(table.is_special(id(marker)), "{marker}");
            assert!(table.get(id(marker)).is_empty(), "{marker}");
        }
        // An added token of another form stays text.
        assert!(!table.is_special(id("<tool_call>")));
        assert_eq!(table.get(id("<tool_call>")), b"<tool_call>");
        assert!(!table.is_special(id("def")));
        assert!(!is_marker("<||>") && is_marker("<|fim_pad|>"));
    }
}
