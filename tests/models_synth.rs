//! `repohop models synth`: a model of another's layout with random weights, from that model's
//! GGUF header alone, which loads and runs like the original.

mod synth_model;

use std::process::Command;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use repohop::llm::qwen::QwenModel;
use repohop::llm::synth::layout_of;

fn synth(like: &std::path::Path, out: &std::path::Path, seed: u64) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_repohop"))
        .args(["models", "synth", "--like"])
        .arg(like)
        .arg("--out")
        .arg(out)
        .args(["--seed", &seed.to_string()])
        .output()
        .unwrap()
}

#[test]
fn a_header_alone_gives_a_model_of_the_same_layout_that_runs() {
    let original = synth_model::random_model("qwen2");
    let dir = tempfile::tempdir().unwrap();
    // Only the header travels: cut the file where the tensor data starts.
    let mut f = std::fs::File::open(original.path()).unwrap();
    let content = gguf_file::Content::read(&mut f).unwrap();
    let bytes = std::fs::read(original.path()).unwrap();
    let header = &bytes[..content.tensor_data_offset as usize];
    assert!(
        header.len() < bytes.len() / 10,
        "the header is a small part of the file"
    );
    let like = dir.path().join("header.gguf");
    std::fs::write(&like, header).unwrap();
    let tokenizer = "{\"model\": {\"type\": \"BPE\"}}";
    std::fs::write(dir.path().join("tokenizer.json"), tokenizer).unwrap();

    let out = dir.path().join("synth");
    let run = synth(&like, &out, 3);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let model = out.join("model.gguf");
    assert_eq!(
        std::fs::read_to_string(out.join("tokenizer.json")).unwrap(),
        tokenizer
    );

    // Same metadata keys, same tensors in the same order, with the same shapes and types.
    let (want_content, want) =
        layout_of(&mut std::fs::File::open(original.path()).unwrap()).unwrap();
    let mut file = std::fs::File::open(&model).unwrap();
    let (got_content, got) = layout_of(&mut file).unwrap();
    let key = |t: &repohop::llm::synth::TensorSpec| (t.name.clone(), t.dims.clone(), t.dtype);
    assert_eq!(
        got.iter().map(key).collect::<Vec<_>>(),
        want.iter().map(key).collect::<Vec<_>>()
    );
    let mut keys: Vec<_> = got_content.metadata.keys().collect();
    let mut want_keys: Vec<_> = want_content.metadata.keys().collect();
    keys.sort();
    want_keys.sort();
    assert_eq!(keys, want_keys);

    // It loads and runs, with finite logits that differ from the original's weights.
    let mut a = QwenModel::from_gguf(&model, &got_content, &mut file, &Device::Cpu).unwrap();
    let mut f = std::fs::File::open(original.path()).unwrap();
    let mut b = QwenModel::from_gguf(original.path(), &content, &mut f, &Device::Cpu).unwrap();
    let tokens = [1u32, 7, 42, 99];
    let logits = |m: &mut QwenModel| -> Vec<f32> {
        let t = m.forward(&tokens, false).unwrap();
        t.flatten_all().unwrap().to_vec1().unwrap()
    };
    let (la, lb) = (logits(&mut a), logits(&mut b));
    assert_eq!(la.len(), synth_model::VOCAB);
    assert!(la.iter().all(|x| x.is_finite()));
    assert_ne!(la, lb);

    // An existing model is never replaced.
    let before = std::fs::read(&model).unwrap();
    let run = synth(&like, &out, 9);
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("exists"));
    assert!(std::fs::read(&model).unwrap() == before);

    // A seed gives the same model every time; another seed another one.
    let again = dir.path().join("again");
    assert!(synth(&like, &again, 3).status.success());
    assert!(std::fs::read(again.join("model.gguf")).unwrap() == std::fs::read(&model).unwrap());
    let other = dir.path().join("other");
    assert!(synth(&like, &other, 4).status.success());
    assert!(std::fs::read(other.join("model.gguf")).unwrap() != std::fs::read(&model).unwrap());
}

#[test]
fn a_file_that_is_no_gguf_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let like = dir.path().join("notes.gguf");
    std::fs::write(&like, "these are notes, not a model").unwrap();
    let out = dir.path().join("synth");
    let run = synth(&like, &out, 0);
    assert!(!run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stderr.contains("GGUF header"), "{stderr}");
    assert!(!out.join("model.gguf").exists() && !out.join("model.gguf.part").exists());
}
