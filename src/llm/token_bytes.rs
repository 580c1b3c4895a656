//! The bytes each token id decodes to, computed once per tokenizer, so decoding and
//! constrained decoding work on exact bytes (a token may hold part of a UTF-8 character).

use std::collections::HashMap;

use tokenizers::{DecoderWrapper, Tokenizer};

pub struct TokenBytes {
    bytes: Vec<Vec<u8>>,
    /// Special added tokens (`<|im_end|>`, `<|endoftext|>`, ...): they end generation and are
    /// never part of the text.
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
                special[id as usize] = tok.special;
                bytes.push(if tok.special {
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
