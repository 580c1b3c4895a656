//! Arguments shared by several commands: which repository (and how to index it), which
//! embedding model.

use anyhow::{bail, Context, Result};
use clap::Args;
use repohop::embed;
use repohop::generate::select::Select;
use repohop::repo::{IndexOptions, Repository};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// Options shared by every command that opens a repository.
#[derive(Args, Debug, Clone)]
pub struct RepoArgs {
    /// Root folder of the repository (or `--repo DIR`).
    #[arg(value_name = "REPO", required_unless_present = "repo")]
    pub path: Option<PathBuf>,
    /// Root folder of the repository (instead of the positional argument).
    #[arg(long = "repo", value_name = "DIR", conflicts_with = "path")]
    pub repo: Option<PathBuf>,
    /// Where the symbol cache lives (default: <repo>/.repohop).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Files larger than this many bytes are skipped (reported as diagnostics).
    #[arg(long, value_name = "BYTES", default_value_t = repohop::repo::walk::DEFAULT_MAX_FILE_SIZE)]
    pub max_file_size: u64,
}

impl RepoArgs {
    fn options(&self) -> IndexOptions {
        IndexOptions {
            max_file_size: self.max_file_size,
            cache_dir: self.cache_dir.clone(),
            use_cache: true,
        }
    }

    /// The repository's root folder, however it was given.
    pub fn root(&self) -> &Path {
        // clap requires one of the two.
        self.repo
            .as_deref()
            .or(self.path.as_deref())
            .unwrap_or(Path::new("."))
    }

    /// Opens the repository, with a progress bar when stderr is a terminal.
    pub fn open(&self) -> Result<Repository> {
        let opts = self.options();
        let root = self.root();
        let repo = if std::io::stderr().is_terminal() {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("indexing {bar:40} {pos}/{len} files")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let progress = |done: usize, total: usize| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
            };
            let r = Repository::open_with_progress(root, &opts, &progress);
            bar.finish_and_clear();
            r
        } else {
            Repository::open(root, &opts)
        };
        repo.with_context(|| format!("cannot index {}", root.display()))
    }
}

/// Which embedding model to run, and where: shared by `index --embed`,
/// `search`, `generate` and `eval`.
#[derive(Args, Debug, Clone)]
pub struct EmbedArgs {
    /// Embedding model: built-in alias, model directory, or Hugging Face repo id.
    #[arg(long, default_value = embed::DEFAULT_MODEL)]
    pub embed_model: String,
    /// cpu, cuda or cuda:N (CUDA needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

/// Switches of line completion: shared by `complete` and `eval` over line tasks.
#[derive(Args, Debug, Clone)]
pub struct LineArgs {
    /// Snippets in the prompt.
    #[arg(long, default_value_t = 4)]
    pub top_k: usize,
    /// SaraCoder without the imported entities and external names (the paper's "w/o EAID").
    #[arg(long)]
    pub no_eaid: bool,
    /// SaraCoder keeping the top-k slices by Jaccard, without SAD, RAP, TPM and MMR.
    #[arg(long)]
    pub no_hfop: bool,
    /// SaraCoder over sliding windows instead of context-graph slices (no structural score).
    #[arg(long)]
    pub no_ccg: bool,
    /// Prompt tokens (the unfinished code takes at most half).
    #[arg(long, default_value_t = 2048)]
    pub budget: usize,
}

impl LineArgs {
    pub fn options(
        &self,
        method: repohop::generate::complete::LineMethod,
    ) -> repohop::generate::complete::CompleteOptions {
        repohop::generate::complete::CompleteOptions {
            method,
            retrieval: repohop::retrieve::saracoder::Options {
                top_k: self.top_k,
                ..Default::default()
            },
            eaid: !self.no_eaid,
            hfop: !self.no_hfop,
            ccg: !self.no_ccg,
            budget: self.budget,
            ..Default::default()
        }
    }
}

/// A remote engine instead of the local model: shared by every command that generates.
#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// Generate with an OpenAI-compatible server (vLLM, SGLang, llama.cpp's llama-server) at
    /// this URL instead of a local model, e.g. http://gpu-box:8000/v1.
    #[arg(long, value_name = "URL")]
    pub llm_endpoint: Option<String>,
    /// The served model (default: the only one the server lists).
    #[arg(long, value_name = "NAME", requires = "llm_endpoint")]
    pub llm_model: Option<String>,
    /// Environment variable holding the server's API key (sent as a bearer token).
    #[arg(long, value_name = "VAR", requires = "llm_endpoint")]
    pub llm_api_key_env: Option<String>,
    /// How constrained steps are asked of the server (default: detected from its model list;
    /// openai sends none and only checks the answers).
    #[arg(long, value_enum, requires = "llm_endpoint")]
    pub llm_dialect: Option<repohop::llm::Dialect>,
    /// Seconds one request to the server may take.
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub llm_timeout: f64,
    /// Requests in flight at once, over all tasks running together.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub llm_max_in_flight: usize,
}

impl RemoteArgs {
    /// The server, connected and checked, when `--llm-endpoint` is given.
    pub fn connect(&self) -> Result<Option<repohop::llm::RemoteLlm>> {
        let Some(endpoint) = &self.llm_endpoint else {
            return Ok(None);
        };
        let api_key = match &self.llm_api_key_env {
            Some(var) => Some(std::env::var(var).with_context(|| {
                format!("--llm-api-key-env {var}: the variable is not set (or not UTF-8)")
            })?),
            None => None,
        };
        let options = repohop::llm::RemoteOptions {
            model: self.llm_model.clone(),
            api_key,
            dialect: self.llm_dialect,
            timeout: std::time::Duration::from_secs_f64(self.llm_timeout.max(1.0)),
            max_in_flight: self.llm_max_in_flight.max(1),
            ..repohop::llm::RemoteOptions::new(endpoint)
        };
        Ok(Some(repohop::llm::RemoteLlm::connect(&options)?))
    }

    /// The server when `--llm-endpoint` is given, else the local `model` loaded.
    pub fn llm_or(&self, model: &str) -> Result<Box<dyn repohop::llm::Llm>> {
        Ok(match self.connect()? {
            Some(remote) => Box::new(remote),
            None => Box::new(repohop::llm::CandleLlm::load(
                model,
                &repohop::llm::LlmOptions::default(),
            )?),
        })
    }
}

/// `--select central|review|likely` chooses among checked answers: without the names check
/// there are none (without a choice, `first` is taken then: see [`Select::or_default`]).
pub fn check_select(select: Option<Select>, no_grounding: bool) -> Result<()> {
    match select {
        Some(s) if no_grounding && s.pools() => bail!(
            "--select {} chooses among checked answers: it needs the names check (drop --no-grounding)",
            s.name()
        ),
        _ => Ok(()),
    }
}
