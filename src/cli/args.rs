//! Arguments shared by several commands: which repository (and how to index it), which
//! embedding model.

use anyhow::{Context, Result};
use clap::Args;
use repohop::embed;
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
