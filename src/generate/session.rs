//! One generation session: the generator, the embedder on its device, where the vectors live,
//! and the pipeline's options. `repohop generate` runs targets through it and `repohop eval`
//! measures the same thing, so what eval reports is what users run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::pipeline::{self, Corpus, Embeddings, PipelineError, PipelineOptions, PipelineRun};
use super::Target;
use crate::embed::{self, EmbedError, LocalEmbedder};
use crate::index::vectors::{IndexError, UpdateReport, VectorIndex};
use crate::llm::{CandleLlm, LlmError, LlmOptions};
use crate::repo::mask::MaskedView;
use crate::repo::Repository;

/// Where a session keeps the vectors of the repositories it works on.
#[derive(Debug, Clone)]
pub enum VectorPlace {
    /// In each repository's cache folder (`.repohop/`, or `--cache-dir`), as `repohop index
    /// --embed` writes them.
    Repository,
    /// Under this folder, one subfolder per repository: for runs that must not write into
    /// the projects they read (evaluation).
    Under(PathBuf),
}

#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The generator: alias, local path or Hugging Face repo id.
    pub model: String,
    pub llm: LlmOptions,
    /// The embedder (loaded only when the method needs vectors) and its device.
    pub embed_model: String,
    pub embed_device: String,
    pub vectors: VectorPlace,
    pub pipeline: PipelineOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot load generator model {model}: {source}")]
    Llm {
        model: String,
        source: Box<LlmError>,
    },
    #[error("cannot load embedding model {model}: {source}")]
    Embed {
        model: String,
        source: Box<EmbedError>,
    },
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
}

/// A session's run of one target.
pub struct SessionRun {
    pub run: PipelineRun,
    /// Seconds spent bringing the repository's vectors up to date (0 when already loaded).
    pub indexing_s: f64,
    /// What that update did, when it ran.
    pub index_report: Option<UpdateReport>,
}

pub struct Session {
    pub llm: CandleLlm,
    pub options: PipelineOptions,
    embedder: Option<LocalEmbedder>,
    corpus: Option<Corpus>,
    place: VectorPlace,
    /// Vectors already brought up to date in this session, by folder.
    vectors: HashMap<PathBuf, VectorIndex>,
    /// Seconds the models took to load.
    pub load_s: f64,
}

impl Session {
    pub fn load(options: SessionOptions) -> Result<Self, SessionError> {
        let started = Instant::now();
        let corpus = options.pipeline.method.corpus(options.pipeline.similarity);
        let embed_error = |source| SessionError::Embed {
            model: options.embed_model.clone(),
            source: Box::new(source),
        };
        let embedder = match corpus {
            Some(_) => {
                let device = embed::parse_device(&options.embed_device).map_err(embed_error)?;
                Some(embed::load(&options.embed_model, &device).map_err(embed_error)?)
            }
            None => None,
        };
        let llm =
            CandleLlm::load(&options.model, &options.llm).map_err(|source| SessionError::Llm {
                model: options.model.clone(),
                source: Box::new(source),
            })?;
        Ok(Self {
            llm,
            options: options.pipeline,
            embedder,
            corpus,
            place: options.vectors,
            vectors: HashMap::new(),
            load_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The folder of `repo`'s vectors of `corpus` in this session.
    fn vectors_dir(&self, repo: &Repository, corpus: Corpus) -> PathBuf {
        match &self.place {
            VectorPlace::Repository => super::vectors::repository_dir(repo, corpus),
            VectorPlace::Under(dir) => dir
                .join(repository_key(repo.root()))
                .join(corpus.cache_name()),
        }
    }

    /// Generates `target` (its function masked in `view`) with the session's method, after
    /// bringing the repository's vectors up to date the first time it is seen.
    pub fn run(
        &mut self,
        repo: &Repository,
        view: &MaskedView,
        target: &Target,
    ) -> Result<SessionRun, SessionError> {
        let started = Instant::now();
        let mut index_report = None;
        let mut embeddings = None;
        if let (Some(embedder), Some(corpus)) = (&self.embedder, self.corpus) {
            let dir = self.vectors_dir(repo, corpus);
            if !self.vectors.contains_key(&dir) {
                let (index, report) = VectorIndex::update(&dir, embedder, &corpus.items(repo))?;
                self.vectors.insert(dir.clone(), index);
                index_report = Some(report);
            }
            embeddings = self
                .vectors
                .get(&dir)
                .map(|index| Embeddings { embedder, index });
        }
        let indexing_s = started.elapsed().as_secs_f64();
        let run = pipeline::run(
            &mut self.llm,
            view,
            target,
            embeddings.as_ref(),
            &self.options,
        )?;
        Ok(SessionRun {
            run,
            indexing_s,
            index_report,
        })
    }
}

/// A folder name for a repository root: its last component and a hash of the whole path, so
/// projects that share a name stay apart.
fn repository_key(root: &Path) -> String {
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "repository".into());
    let hash = Sha256::digest(root.as_os_str().as_encoded_bytes());
    format!("{name}-{}", &hex::encode(hash)[..12])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repositories_with_one_name_get_separate_vector_folders() {
        let a = repository_key(Path::new("/src/Utilities/boltons"));
        let b = repository_key(Path::new("/other/boltons"));
        assert!(a.starts_with("boltons-") && b.starts_with("boltons-"));
        assert_ne!(a, b);
        assert_eq!(a, repository_key(Path::new("/src/Utilities/boltons")));
    }
}
