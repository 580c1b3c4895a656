//! One engine for several threads: [`SharedLlm::spawn`] moves a [`CandleLlm`] onto a thread
//! of its own, and each clone of the handle is an [`Llm`]. The engine decodes the answers of
//! every caller together (continuous batching: an answer joins between two decode steps,
//! after its prompt is computed, and leaves when it ends), so concurrent pipelines share each
//! pass over the weights. A caller that stops waiting ([`SharedLlm::submit`], then dropping
//! the [`Ticket`]) cancels its requests: they leave the batch at the next step, freeing
//! their room, and the others go on.

use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Weak};

use super::engine::{CandleLlm, Live};
use super::{GenerateRequest, GenerateResponse, Llm, LlmError, Prompt, Scored};

type Answers = Vec<Result<GenerateResponse, LlmError>>;

enum Job {
    /// The caller's liveness: it is gone once the weak handle has no strong one.
    Generate(Vec<GenerateRequest>, Sender<Answers>, Weak<()>),
    Count(Prompt, Sender<Result<usize, LlmError>>),
    Score(Prompt, String, Sender<Result<Scored, LlmError>>),
    InFlight(Sender<usize>),
}

/// Requests submitted to a [`SharedLlm`]: [`Ticket::wait`] gives their answers; dropping the
/// ticket before that cancels those not answered yet.
pub struct Ticket {
    answers: Option<Receiver<Answers>>,
    count: usize,
    _alive: Arc<()>,
}

impl Ticket {
    /// Blocks until every request has ended, and gives their results in order.
    pub fn wait(mut self) -> Answers {
        let answers = self.answers.take().and_then(|rx| rx.recv().ok());
        answers.unwrap_or_else(|| (0..self.count).map(|_| Err(SharedLlm::stopped())).collect())
    }
}

/// A handle on an engine running on its own thread; the thread ends with the last handle.
#[derive(Clone)]
pub struct SharedLlm {
    jobs: Sender<Job>,
    name: String,
    window: usize,
}

impl std::fmt::Debug for SharedLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedLlm")
            .field("name", &self.name)
            .finish()
    }
}

impl SharedLlm {
    pub fn spawn(llm: CandleLlm) -> Self {
        let (jobs, rx) = mpsc::channel();
        let name = llm.name().to_string();
        let window = llm.context_window();
        std::thread::Builder::new()
            .name("repohop-engine".into())
            .spawn(move || serve(llm, rx))
            .expect("the engine thread starts");
        Self { jobs, name, window }
    }

    fn stopped() -> LlmError {
        LlmError::InvalidRequest("the shared engine has stopped".into())
    }

    /// Hands `requests` to the engine without waiting; see [`Ticket`].
    pub fn submit(&self, requests: &[GenerateRequest]) -> Ticket {
        let (tx, rx) = mpsc::channel();
        let alive = Arc::new(());
        let job = Job::Generate(requests.to_vec(), tx, Arc::downgrade(&alive));
        Ticket {
            answers: self.jobs.send(job).ok().map(|_| rx),
            count: requests.len(),
            _alive: alive,
        }
    }

    /// Requests the engine holds now, decoding or waiting for room (0 once it has stopped).
    pub fn in_flight(&self) -> usize {
        let (tx, rx) = mpsc::channel();
        let _ = self.jobs.send(Job::InFlight(tx));
        rx.recv().unwrap_or(0)
    }
}

impl Llm for SharedLlm {
    fn generate(&mut self, request: &GenerateRequest) -> Result<GenerateResponse, LlmError> {
        self.generate_batch(std::slice::from_ref(request))
            .pop()
            .unwrap_or_else(|| Err(Self::stopped()))
    }

    fn generate_batch(&mut self, requests: &[GenerateRequest]) -> Answers {
        self.submit(requests).wait()
    }

    fn count_tokens(&self, prompt: &Prompt) -> Result<usize, LlmError> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Job::Count(prompt.clone(), tx))
            .map_err(|_| Self::stopped())?;
        rx.recv().map_err(|_| Self::stopped())?
    }

    fn score(&mut self, prompt: &Prompt, continuation: &str) -> Result<Scored, LlmError> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Job::Score(prompt.clone(), continuation.to_string(), tx))
            .map_err(|_| Self::stopped())?;
        rx.recv().map_err(|_| Self::stopped())?
    }

    fn context_window(&self) -> usize {
        self.window
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// A caller's requests in flight: their results so far, and where to send them.
struct Pending {
    results: Vec<Option<Result<GenerateResponse, LlmError>>>,
    reply: Sender<Answers>,
    caller: Weak<()>,
}

/// The engine thread: takes jobs between decode steps (waiting for one when nothing is in
/// flight) until every handle is gone. Requests start in the order they came, as soon as the
/// KV budget lets them (see [`CandleLlm::fits`]). A caller that has gone loses its requests
/// before the next step.
fn serve(mut llm: CandleLlm, jobs: Receiver<Job>) {
    let mut live: Vec<Live<(u64, usize)>> = Vec::new();
    // Each with its KV need, computed once.
    let mut waiting: VecDeque<(GenerateRequest, (u64, usize), usize)> = VecDeque::new();
    let mut pending: HashMap<u64, Pending> = HashMap::new();
    let mut next_id = 0u64;
    loop {
        // Nothing in flight means nothing waits either (one always fits): block for a job.
        let job = if live.is_empty() {
            match jobs.recv() {
                Ok(job) => Some(job),
                Err(_) => return,
            }
        } else {
            jobs.try_recv().ok()
        };
        cancel_gone(&mut pending, &mut live, &mut waiting);
        match job {
            Some(Job::Count(prompt, reply)) => {
                let _ = reply.send(llm.count_tokens(&prompt));
            }
            // Between decode steps, on the engine's own cache (answers in flight have theirs).
            Some(Job::Score(prompt, continuation, reply)) => {
                let _ = reply.send(llm.score(&prompt, &continuation));
            }
            Some(Job::InFlight(reply)) => {
                let _ = reply.send(live.len() + waiting.len());
            }
            Some(Job::Generate(requests, reply, caller)) => {
                let id = next_id;
                next_id += 1;
                let results = requests.iter().map(|_| None).collect();
                let job = Pending {
                    results,
                    reply,
                    caller,
                };
                pending.insert(id, job);
                for (i, r) in requests.into_iter().enumerate() {
                    let need = llm.kv_need(&r);
                    waiting.push_back((r, (id, i), need));
                }
                // An empty job is answered at once.
                record(&mut pending, Vec::new(), id);
            }
            // Nothing new: one decode step of everything in flight.
            None => {
                for (tag, result) in llm.advance(&mut live) {
                    record(&mut pending, vec![(tag, result)], tag.0);
                }
            }
        }
        while waiting.front().is_some_and(|w| llm.fits(&live, w.2)) {
            let (req, tag, _) = waiting.pop_front().expect("a front was checked");
            if let Some(ended) = llm.admit(&mut live, &req, tag) {
                record(&mut pending, vec![ended], tag.0);
            }
        }
    }
}

/// Drops the requests of callers that stopped waiting, in flight or not started.
fn cancel_gone(
    pending: &mut HashMap<u64, Pending>,
    live: &mut Vec<Live<(u64, usize)>>,
    waiting: &mut VecDeque<(GenerateRequest, (u64, usize), usize)>,
) {
    let gone: Vec<u64> = pending
        .iter()
        .filter(|(_, p)| p.caller.strong_count() == 0)
        .map(|(id, _)| *id)
        .collect();
    for id in gone {
        pending.remove(&id);
        live.retain(|l| l.tag().0 != id);
        waiting.retain(|w| w.1 .0 != id);
    }
}

/// Records the results of job `id`'s requests, and answers its caller once all have ended.
fn record(
    pending: &mut HashMap<u64, Pending>,
    ended: Vec<((u64, usize), Result<GenerateResponse, LlmError>)>,
    id: u64,
) {
    let Some(p) = pending.get_mut(&id) else {
        return;
    };
    for ((_, i), result) in ended {
        if let Some(slot) = p.results.get_mut(i) {
            *slot = Some(result);
        }
    }
    if p.results.iter().all(Option::is_some) {
        if let Some(p) = pending.remove(&id) {
            let _ = p.reply.send(p.results.into_iter().flatten().collect());
        }
    }
}
