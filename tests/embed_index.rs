//! The cached vector index: incremental re-indexing, persistence, corruption, search.

use std::path::Path;

use repohop::embed::{self, Embedder, LocalEmbedder, TextKind};
use repohop::index::vectors::{IndexError, Item, Row, VectorIndex};

fn model() -> LocalEmbedder {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed/tiny-roberta");
    embed::load(dir.to_str().unwrap(), &candle_core::Device::Cpu).unwrap()
}

/// Functions of two files; `edit` changes every function of `a.py`.
fn items(edit: bool) -> Vec<Item> {
    let mut out = Vec::new();
    let a_suffix = if edit { "    log(x)\n" } else { "" };
    for (i, name) in ["load", "save", "merge"].iter().enumerate() {
        out.push(Item {
            key: format!("a.py::{name}"),
            qualname: name.to_string(),
            path: "a.py".into(),
            start_line: 1 + 4 * i as u32,
            text: format!("def {name}(x):\n{a_suffix}    return x + {i}"),
        });
    }
    for (i, name) in ["Cache.get", "Cache.put"].iter().enumerate() {
        out.push(Item {
            key: format!("b.py::{name}"),
            qualname: name.to_string(),
            path: "b.py".into(),
            start_line: 3 + 5 * i as u32,
            text: format!(
                "def {}(self, key):\n    return self.items[key] * {i}",
                &name[6..]
            ),
        });
    }
    out
}

#[test]
fn reindexing_embeds_only_what_changed() {
    let e = model();
    let dir = tempfile::tempdir().unwrap();
    let (first, r) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    assert_eq!((r.embedded, r.reused, r.rebuilt.clone()), (5, 0, None));
    assert_eq!(first.len(), 5);

    // No change: nothing embedded, nothing written.
    let (mat, side) = VectorIndex::files(dir.path(), &e.info().id);
    let written = std::fs::metadata(&side).unwrap().modified().unwrap();
    let (again, r) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    assert_eq!((r.embedded, r.reused, r.dropped), (0, 5, 0));
    assert_eq!(r.stats.texts, 0);
    assert_eq!(
        std::fs::metadata(&side).unwrap().modified().unwrap(),
        written
    );
    assert_eq!(again.rows(), first.rows());

    // Editing a.py re-embeds exactly a.py's functions.
    let (edited, r) = VectorIndex::update(dir.path(), &e, &items(true)).unwrap();
    assert_eq!(
        r.embedded_keys,
        vec!["a.py::load", "a.py::save", "a.py::merge"]
    );
    assert_eq!((r.reused, r.dropped), (2, 3));
    for i in 3..5 {
        assert_eq!(edited.vector(i), first.vector(i));
    }
    assert_ne!(edited.vector(0), first.vector(0));
    assert!(mat.exists());
}

#[test]
fn loaded_and_fresh_indexes_give_the_same_results() {
    let e = model();
    let dir = tempfile::tempdir().unwrap();
    let (fresh, _) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    let loaded = VectorIndex::load(dir.path(), &e.info().id, e.info().dim)
        .unwrap()
        .unwrap();
    let q = e.embed(&["def load(x):"], TextKind::Query).unwrap();
    let all = |_: &Row| true;
    let a = fresh.search(q.row(0), 3, &all).unwrap();
    let b = loaded.search(q.row(0), 3, &all).unwrap();
    assert_eq!(a.len(), 3);
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((x.index, x.score), (y.index, y.score));
    }
    // Scores are cosines: the best equals the explicit cosine with that row, sorted best first.
    assert!(a.windows(2).all(|w| w[0].score >= w[1].score));
    let v = fresh.vector(a[0].index);
    let qn: f32 = q.row(0).iter().map(|x| x * x).sum::<f32>().sqrt();
    let cos: f32 = v.iter().zip(q.row(0)).map(|(x, y)| x * y).sum::<f32>() / qn;
    assert!((cos - a[0].score).abs() < 1e-5);
    // The filter hides rows (e.g. the masked target).
    let hide = |r: &Row| r.key != a[0].row.key;
    let c = fresh.search(q.row(0), 3, &hide).unwrap();
    assert!(c.iter().all(|h| h.row.key != a[0].row.key));
    assert_eq!(c[0].row.key, a[1].row.key);
}

#[test]
fn corrupt_or_mismatched_caches_are_reported_and_rebuilt() {
    let e = model();
    let dir = tempfile::tempdir().unwrap();
    let (good, _) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    let (mat, side) = VectorIndex::files(dir.path(), &e.info().id);

    // Truncated matrix.
    let bytes = std::fs::read(&mat).unwrap();
    std::fs::write(&mat, &bytes[..bytes.len() - 7]).unwrap();
    assert!(matches!(
        VectorIndex::load(dir.path(), &e.info().id, e.info().dim),
        Err(IndexError::Corrupt { .. })
    ));
    let (rebuilt, r) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    assert!(
        r.rebuilt.as_deref().unwrap().contains("safetensors"),
        "{:?}",
        r.rebuilt
    );
    assert_eq!(r.embedded, 5);
    assert_eq!(rebuilt.rows(), good.rows());

    // A matrix that does not belong to its sidecar (same shape, other values).
    let mut bytes = std::fs::read(&mat).unwrap();
    let n = bytes.len();
    bytes[n - 1] ^= 0x40;
    std::fs::write(&mat, &bytes).unwrap();
    let (_, r) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    assert!(
        r.rebuilt.as_deref().unwrap().contains("checksum"),
        "{:?}",
        r.rebuilt
    );

    // Unparseable sidecar.
    std::fs::write(&side, "{").unwrap();
    let (_, r) = VectorIndex::update(dir.path(), &e, &items(false)).unwrap();
    assert!(
        r.rebuilt.as_deref().unwrap().contains("sidecar"),
        "{:?}",
        r.rebuilt
    );
    assert!(VectorIndex::load(dir.path(), &e.info().id, e.info().dim)
        .unwrap()
        .is_some());
}

#[test]
fn top_k_over_many_rows_matches_a_full_sort() {
    let dim = 8;
    let n = 5000;
    let mut state = 42u64;
    let mut rnd = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 33) as f32 / (1u64 << 31) as f32) - 0.5
    };
    let matrix: Vec<f32> = (0..n * dim).map(|_| rnd()).collect();
    let rows: Vec<Row> = (0..n)
        .map(|i| Row {
            key: i.to_string(),
            qualname: format!("f{i}"),
            path: "x.py".into(),
            start_line: i as u32,
            hash: String::new(),
        })
        .collect();
    let idx = VectorIndex::from_parts("m", dim, rows, matrix);
    let q: Vec<f32> = (0..dim).map(|_| rnd()).collect();
    let odd = |r: &Row| r.start_line % 2 == 1;
    let hits = idx.search(&q, 10, &odd).unwrap();
    let mut all: Vec<(f32, usize)> = idx
        .scores(&q)
        .unwrap()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(i, s)| (s, i))
        .collect();
    all.sort_by(|a, b| b.0.total_cmp(&a.0));
    let want: Vec<usize> = all[..10].iter().map(|p| p.1).collect();
    assert_eq!(hits.iter().map(|h| h.index).collect::<Vec<_>>(), want);
}

#[test]
fn an_index_folder_or_file_planted_as_a_link_is_neither_read_nor_written() {
    use std::os::unix::fs::symlink;
    let e = model();
    let (id, dim) = (e.info().id.clone(), e.info().dim);
    let t = tempfile::tempdir().unwrap();
    let elsewhere = t.path().join("elsewhere");
    VectorIndex::update(&elsewhere, &e, &items(false)).unwrap();
    let (mat, side) = VectorIndex::files(&elsewhere, &id);
    let before = (std::fs::read(&mat).unwrap(), std::fs::read(&side).unwrap());
    let unchanged = || {
        assert_eq!(
            (std::fs::read(&mat).unwrap(), std::fs::read(&side).unwrap()),
            before
        );
    };

    // The index folder is a link (say `.repohop/vectors/functions` in a cloned repository).
    std::fs::create_dir(t.path().join("cache")).unwrap();
    let linked = t.path().join("cache/functions");
    symlink(&elsewhere, &linked).unwrap();
    let err = VectorIndex::load(&linked, &id, dim)
        .unwrap_err()
        .to_string();
    assert!(err.contains("symbolic link"), "{err}");
    let err = VectorIndex::update(&linked, &e, &items(true)).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    unchanged();

    // Its files are links.
    let real = t.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let (lmat, lside) = VectorIndex::files(&real, &id);
    symlink(&mat, &lmat).unwrap();
    symlink(&side, &lside).unwrap();
    let err = VectorIndex::load(&real, &id, dim).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert!(VectorIndex::update(&real, &e, &items(true)).is_err());
    unchanged();
}
