//! Pass@1 and its splits, and dependency recall of a method's context.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::runner::{Outcome, TaskResult};
use super::tasks::{DepKind, Dependency};

/// Passed out of total, and the ratio.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub passed: usize,
    pub total: usize,
    pub pass_at_1: f64,
}

impl Score {
    fn add(&mut self, passed: bool) {
        self.total += 1;
        self.passed += passed as usize;
        self.pass_at_1 = self.passed as f64 / self.total as f64;
    }
}

/// Pass@1 overall, by project and by dependency kind, plus outcome counts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PassSummary {
    pub overall: Score,
    pub by_project: BTreeMap<String, Score>,
    /// Keys `none`, `intra_class`, `intra_file`, `cross_file`; a task counts under each it has.
    pub by_kind: BTreeMap<String, Score>,
    pub outcomes: BTreeMap<String, usize>,
}

pub fn pass_summary<'a>(results: impl IntoIterator<Item = &'a TaskResult>) -> PassSummary {
    let mut s = PassSummary::default();
    for k in DepKind::ALL {
        s.by_kind.insert(k.as_str().to_string(), Score::default());
    }
    for r in results {
        let passed = r.outcome == Outcome::Pass;
        s.overall.add(passed);
        s.by_project
            .entry(r.project.clone())
            .or_default()
            .add(passed);
        for k in &r.kinds {
            s.by_kind
                .entry(k.as_str().to_string())
                .or_default()
                .add(passed);
        }
        *s.outcomes
            .entry(r.outcome.as_str().to_string())
            .or_default() += 1;
    }
    s
}

/// Share of the task's dependency names found in a method's final context (qualified names).
/// A context entry covers a dependency when it names it or encloses it (`pkg.mod.Class` covers
/// `pkg.mod.Class.method`). `None` when the task has no dependencies.
pub fn dependency_recall(context: &[String], dependency: &Dependency) -> Option<f64> {
    let wanted = dependency.names();
    if wanted.is_empty() {
        return None;
    }
    let have: HashSet<&str> = context.iter().map(String::as_str).collect();
    let found = wanted
        .iter()
        .filter(|dep| {
            have.contains(*dep)
                || dep
                    .match_indices('.')
                    .any(|(i, _)| have.contains(&dep[..i]))
        })
        .count();
    Some(found as f64 / wanted.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(project: &str, kinds: Vec<DepKind>, outcome: Outcome) -> TaskResult {
        TaskResult {
            namespace: "x".into(),
            project: project.into(),
            kinds,
            outcome,
            failed_test: None,
            tests_run: 1,
            test_seconds: 0.0,
            message: None,
            output_tail: String::new(),
        }
    }

    #[test]
    fn splits_by_project_and_kind() {
        use DepKind::*;
        let rs = [
            result("a", vec![None], Outcome::Pass),
            result("a", vec![IntraClass, CrossFile], Outcome::Fail),
            result("b", vec![IntraFile, CrossFile], Outcome::Pass),
            result("b", vec![CrossFile], Outcome::Timeout),
        ];
        let s = pass_summary(&rs);
        assert_eq!((s.overall.passed, s.overall.total), (2, 4));
        assert_eq!(s.overall.pass_at_1, 0.5);
        assert_eq!(s.by_project["a"].passed, 1);
        assert_eq!(s.by_project["b"].total, 2);
        assert_eq!(
            (
                s.by_kind["cross_file"].passed,
                s.by_kind["cross_file"].total
            ),
            (1, 3)
        );
        assert_eq!(s.by_kind["intra_class"].pass_at_1, 0.0);
        assert_eq!(s.by_kind["none"].pass_at_1, 1.0);
        assert_eq!(s.outcomes["timeout"], 1);
    }

    #[test]
    fn recall_counts_named_or_enclosing_context() {
        let dep = Dependency {
            intra_class: vec!["p.m.C.a".into()],
            intra_file: vec!["p.m.f".into()],
            cross_file: vec!["p.n.g".into(), "p.n.K.h".into()],
        };
        let ctx = vec![
            "p.m.f".to_string(),
            "p.n.K".to_string(),
            "p.m.Cx".to_string(),
        ];
        assert_eq!(dependency_recall(&ctx, &dep), Some(0.5));
        assert_eq!(dependency_recall(&[], &dep), Some(0.0));
        assert_eq!(dependency_recall(&ctx, &Dependency::default()), None);
    }
}
