//! One generation session: the generator, the embedder on its device, where the vectors live,
//! and the pipeline's options. `repohop generate` runs targets through it and `repohop eval`
//! measures the same thing, so what eval reports is what users run.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::model_tests::TestRunner;
use super::pipeline::{self, Corpus, Embeddings, PipelineError, PipelineOptions, PipelineRun};
use super::Target;
use crate::embed::{self, EmbedError, LocalEmbedder};
use crate::index::vectors::{IndexError, UpdateReport, VectorIndex};
use crate::llm::{CandleLlm, Engine, Llm, LlmError, LlmOptions};
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
    /// An engine already running for several sessions (concurrent pipelines), or a server:
    /// used instead of loading `model`.
    pub engine: Option<Engine>,
    /// The embedder (loaded only when the method needs vectors) and its device.
    pub embed_model: String,
    pub embed_device: String,
    pub vectors: VectorPlace,
    pub pipeline: PipelineOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// Causes are in the message, not chained, so `{:#}` prints each once. The model's own
    /// load errors name it.
    #[error(transparent)]
    Llm(Box<LlmError>),
    #[error("cannot load embedding model {model}: {err}")]
    Embed { model: String, err: Box<EmbedError> },
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
    pub llm: Box<dyn Llm>,
    /// The engine behind `llm` when several sessions share it.
    engine: Option<Engine>,
    pub options: PipelineOptions,
    /// The embedder and the vectors, shared with the session's forks.
    shelf: Arc<Shelf>,
    corpus: Option<Corpus>,
    place: VectorPlace,
    /// Seconds the models took to load.
    pub load_s: f64,
}

struct Shelf {
    embedder: Option<LocalEmbedder>,
    /// Vectors already brought up to date, by folder.
    vectors: Mutex<HashMap<PathBuf, Arc<VectorIndex>>>,
}

impl Session {
    pub fn load(options: SessionOptions) -> Result<Self, SessionError> {
        let started = Instant::now();
        let corpus = options.pipeline.method.corpus(options.pipeline.similarity);
        let embed_error = |err| SessionError::Embed {
            model: options.embed_model.clone(),
            err: Box::new(err),
        };
        let embedder = match corpus {
            Some(_) => {
                let device = embed::parse_device(&options.embed_device).map_err(embed_error)?;
                Some(embed::load(&options.embed_model, &device).map_err(embed_error)?)
            }
            None => None,
        };
        let llm: Box<dyn Llm> = match options.engine.clone() {
            Some(engine) => engine.handle(),
            None => Box::new(
                CandleLlm::load(&options.model, &options.llm)
                    .map_err(|err| SessionError::Llm(Box::new(err)))?,
            ),
        };
        Ok(Self {
            llm,
            engine: options.engine,
            options: options.pipeline,
            shelf: Arc::new(Shelf {
                embedder,
                vectors: Mutex::new(HashMap::new()),
            }),
            corpus,
            place: options.vectors,
            load_s: started.elapsed().as_secs_f64(),
        })
    }

    /// Another session on the same shared engine, embedder and vectors, to run targets at
    /// the same time as this one; `None` when this session's engine is its own.
    pub fn fork(&self) -> Option<Session> {
        let engine = self.engine.clone()?;
        Some(Session {
            llm: engine.handle(),
            engine: Some(engine),
            options: self.options.clone(),
            shelf: Arc::clone(&self.shelf),
            corpus: self.corpus,
            place: self.place.clone(),
            load_s: 0.0,
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
        tests: Option<&dyn TestRunner>,
    ) -> Result<SessionRun, SessionError> {
        let started = Instant::now();
        let mut index_report = None;
        let mut embeddings = None;
        let mut index = None;
        if let (Some(embedder), Some(corpus)) = (&self.shelf.embedder, self.corpus) {
            let dir = self.vectors_dir(repo, corpus);
            // Held while a repository is indexed: its other sessions wait for those vectors.
            let mut vectors = self
                .shelf
                .vectors
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            index = Some(match vectors.get(&dir) {
                Some(known) => Arc::clone(known),
                None => {
                    let (fresh, report) = VectorIndex::update(&dir, embedder, &corpus.items(repo))?;
                    index_report = Some(report);
                    let fresh = Arc::new(fresh);
                    vectors.insert(dir, Arc::clone(&fresh));
                    fresh
                }
            });
        }
        if let (Some(embedder), Some(index)) = (&self.shelf.embedder, &index) {
            embeddings = Some(Embeddings {
                embedder,
                index: index.as_ref(),
            });
        }
        let indexing_s = started.elapsed().as_secs_f64();
        // One key per target: a remote engine's router keeps its calls on one replica.
        let key = format!(
            "{}:{}:{}",
            repository_key(repo.root()),
            target.path,
            target.name
        );
        self.llm.set_session(Some(&key));
        let run = pipeline::run(
            self.llm.as_mut(),
            view,
            target,
            embeddings.as_ref(),
            &self.options,
            tests,
        );
        self.llm.set_session(None);
        let run = run?;
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

    #[test]
    fn a_load_error_names_its_cause_once() {
        let device = EmbedError::Device {
            spec: "cuda".into(),
            reason: "no GPU".into(),
        };
        let err = anyhow::Error::new(SessionError::Embed {
            model: "minilm".into(),
            err: Box::new(device),
        });
        assert_eq!(
            format!("{err:#}"),
            "cannot load embedding model minilm: device `cuda`: no GPU"
        );
    }
}
