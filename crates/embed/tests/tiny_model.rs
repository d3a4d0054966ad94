//! A tiny randomly initialised BERT written by the test itself (weights,
//! tokenizer.json, sentence-transformers files), to check that any BERT
//! sentence-transformers folder works — here a CLS-pooled one — and that
//! results do not depend on how texts are batched or padded.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use refscore_embed::{read_settings, resolve, EmbedOptions, EmbeddingStage, ModelLookup, Pooling};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{Tokenizer, TruncationParams};

const WORDS: &[&str] = &[
    "paris", "is", "the", "capital", "of", "france", "london", "answer", "42", "cat", "sat", "on",
    "mat", "##s",
];
const HIDDEN: usize = 32;
const LAYERS: usize = 2;
const INTER: usize = 64;
const POSITIONS: usize = 64;

fn write_model(dir: &Path, pooling: &str, max_seq_length: usize) {
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    let mut vocab: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    vocab.extend(WORDS.iter().map(|s| s.to_string()));
    std::fs::write(dir.join("vocab.txt"), vocab.join("\n")).unwrap();
    let wp = WordPiece::from_file(dir.join("vocab.txt").to_str().unwrap())
        .unk_token("[UNK]".into())
        .build()
        .unwrap();
    let mut tok = Tokenizer::new(wp);
    tok.with_normalizer(Some(BertNormalizer::default()))
        .unwrap();
    tok.with_pre_tokenizer(Some(BertPreTokenizer));
    tok.with_post_processor(Some(BertProcessing::new(
        ("[SEP]".into(), 3),
        ("[CLS]".into(), 2),
    )));
    tok.save(dir.join("tokenizer.json"), false).unwrap();

    let config = serde_json::json!({
        "architectures": ["BertModel"], "model_type": "bert", "hidden_act": "gelu",
        "hidden_size": HIDDEN, "num_attention_heads": 4, "num_hidden_layers": LAYERS,
        "intermediate_size": INTER, "max_position_embeddings": POSITIONS, "type_vocab_size": 2,
        "vocab_size": vocab.len(), "layer_norm_eps": 1e-12, "pad_token_id": 0,
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "initializer_range": 0.02
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    std::fs::write(
        dir.join("modules.json"),
        r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    let cls = pooling == "cls";
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        format!(r#"{{"word_embedding_dimension":{HIDDEN},"pooling_mode_cls_token":{cls},"pooling_mode_mean_tokens":{}}}"#, !cls),
    )
    .unwrap();
    std::fs::write(
        dir.join("sentence_bert_config.json"),
        format!(r#"{{"max_seq_length":{max_seq_length}}}"#),
    )
    .unwrap();

    let dev = Device::Cpu;
    let mut w: HashMap<String, Tensor> = HashMap::new();
    let mut rand = |name: String, shape: &[usize]| {
        w.insert(name, Tensor::randn(0f32, 0.5, shape, &dev).unwrap());
    };
    rand(
        "embeddings.word_embeddings.weight".into(),
        &[vocab.len(), HIDDEN],
    );
    rand(
        "embeddings.position_embeddings.weight".into(),
        &[POSITIONS, HIDDEN],
    );
    rand(
        "embeddings.token_type_embeddings.weight".into(),
        &[2, HIDDEN],
    );
    for l in 0..LAYERS {
        let p = format!("encoder.layer.{l}");
        for m in [
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ] {
            rand(format!("{p}.{m}.weight"), &[HIDDEN, HIDDEN]);
            rand(format!("{p}.{m}.bias"), &[HIDDEN]);
        }
        rand(format!("{p}.intermediate.dense.weight"), &[INTER, HIDDEN]);
        rand(format!("{p}.intermediate.dense.bias"), &[INTER]);
        rand(format!("{p}.output.dense.weight"), &[HIDDEN, INTER]);
        rand(format!("{p}.output.dense.bias"), &[HIDDEN]);
    }
    let ones = Tensor::ones(HIDDEN, candle_core::DType::F32, &dev).unwrap();
    let zeros = Tensor::zeros(HIDDEN, candle_core::DType::F32, &dev).unwrap();
    let mut norms = vec!["embeddings.LayerNorm".to_string()];
    for l in 0..LAYERS {
        norms.push(format!("encoder.layer.{l}.attention.output.LayerNorm"));
        norms.push(format!("encoder.layer.{l}.output.LayerNorm"));
    }
    for n in norms {
        w.insert(format!("{n}.weight"), ones.clone());
        w.insert(format!("{n}.bias"), zeros.clone());
    }
    candle_core::safetensors::save(&w, dir.join("model.safetensors")).unwrap();
}

fn stage(dir: &Path) -> EmbeddingStage {
    EmbeddingStage::load(EmbedOptions {
        model: Some(dir.to_str().unwrap().to_string()),
        ..EmbedOptions::default()
    })
    .unwrap()
}

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
}

#[test]
fn a_cls_pooled_folder_works_and_batching_does_not_change_results() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "cls", 32);
    let files = read_settings(dir.path()).unwrap();
    assert_eq!(files.pooling, Pooling::Cls);
    assert_eq!(files.max_seq_length, 32);
    let mut s = stage(dir.path());

    let short = "paris is the capital";
    let long = "the cat sat on the mat of the capital of france is paris the answer is 42";
    let alone = s.embed(&[short]).unwrap();
    let padded = s.embed(&[long, short, "cats"]).unwrap();
    assert!(
        close(&alone[0].pooled, &padded[1].pooled, 1e-5),
        "padding changed the sentence vector"
    );
    assert!(
        close(&alone[0].tokens, &padded[1].tokens, 1e-5),
        "padding changed the token vectors"
    );
    // CLS pooling: the sentence vector is the normalised first token vector.
    assert!(close(&alone[0].pooled, &alone[0].tokens[..HIDDEN], 1e-6));
    // Unit vectors; identical texts score 1.
    let norm: f32 = alone[0].pooled.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5);
    let w = vec![1.0; alone[0].ids.len()];
    let t = &alone[0].tokens;
    let [p, r, f] = refscore_embed::bertscore(t, t, HIDDEN, &w, &w);
    assert!((p - 1.0).abs() < 1e-5 && (r - 1.0).abs() < 1e-5 && (f - 1.0).abs() < 1e-5);
    assert!(
        (refscore_embed::cosine(&alone[0], &padded[0]) - 1.0).abs() > 1e-3,
        "different texts differ"
    );
}

#[test]
fn truncation_follows_max_seq_length_not_the_tokenizer_file() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "mean", 8);
    let s = stage(dir.path());
    let ids = s
        .token_ids(&["the cat sat on the mat of the capital of france", "cat"])
        .unwrap();
    assert_eq!(
        ids[0].len(),
        8,
        "truncated at max_seq_length, [CLS]/[SEP] included"
    );
    assert_eq!((ids[0][0], ids[0][7]), (2, 3));
    assert_eq!(ids[1].len(), 3, "no padding");
    let over = EmbeddingStage::load(EmbedOptions {
        model: Some(dir.path().to_str().unwrap().into()),
        max_seq_length: Some(POSITIONS + 1),
        ..EmbedOptions::default()
    });
    assert!(over.err().unwrap().message.contains("position limit"));
}

#[test]
fn mean_and_cls_pooling_differ() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_model(a.path(), "mean", 32);
    std::fs::copy(
        a.path().join("model.safetensors"),
        b.path().join("model.safetensors"),
    )
    .unwrap();
    write_model(b.path(), "cls", 32);
    std::fs::copy(
        a.path().join("model.safetensors"),
        b.path().join("model.safetensors"),
    )
    .unwrap();
    let text = ["london is the capital"];
    let (ma, mb) = (
        stage(a.path()).embed(&text).unwrap(),
        stage(b.path()).embed(&text).unwrap(),
    );
    assert!(
        close(&ma[0].tokens, &mb[0].tokens, 1e-6),
        "same weights, same token vectors"
    );
    assert!(
        !close(&ma[0].pooled, &mb[0].pooled, 1e-3),
        "pooling modes give different sentence vectors"
    );
}

#[test]
fn broken_folders_and_missing_models_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let err = read_settings(dir.path()).unwrap_err();
    assert!(
        err.message.contains("config.json is missing"),
        "{}",
        err.message
    );
    write_model(dir.path(), "mean", 16);
    let pooling = |json: &str| {
        std::fs::write(dir.path().join("1_Pooling/config.json"), json).unwrap();
        read_settings(dir.path())
    };
    // Every sentence-transformers mode, in both config forms.
    let mode = |json: &str| pooling(json).unwrap().pooling;
    assert_eq!(
        mode(r#"{"pooling_mode_weightedmean_tokens":true}"#),
        Pooling::WeightedMean
    );
    assert_eq!(
        mode(r#"{"pooling_mode_lasttoken":true}"#),
        Pooling::LastToken
    );
    assert_eq!(mode(r#"{"pooling_mode": "cls"}"#), Pooling::Cls);
    assert_eq!(mode(r#"{"pooling_mode": ["max"]}"#), Pooling::Max);
    assert_eq!(
        mode(r#"{"pooling_mode": "mean_sqrt_len_tokens"}"#),
        Pooling::Mean
    );
    let settings = pooling(r#"{"pooling_mode": "mean", "include_prompt": false}"#).unwrap();
    assert!(!settings.include_prompt);
    // Several modes at once (concatenated vectors) or an unknown one: refused.
    for json in [
        r#"{"pooling_mode_cls_token":true, "pooling_mode_mean_tokens":true}"#,
        r#"{"pooling_mode": ["cls", "mean"]}"#,
        r#"{"pooling_mode": "median"}"#,
    ] {
        let err = pooling(json).unwrap_err().message;
        assert!(err.contains("exactly one pooling mode"), "{json}: {err}");
    }
    let err = resolve(Some("/definitely/not/here"), &ModelLookup::default()).unwrap_err();
    assert!(err.message.contains("no such folder"), "{}", err.message);
}

#[test]
fn hub_ids_resolve_from_the_local_hugging_face_cache_offline() {
    // The hf-hub cache layout: HF_HOME/hub/models--ORG--NAME/{refs/main, snapshots/REV/...}.
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("hub/models--acme--tiny-bert");
    let snap = repo.join("snapshots/0123abcd");
    write_model(&snap, "cls", 16);
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), "0123abcd").unwrap();
    // This test binary's only test touching the variable (hf-hub's own).
    std::env::set_var("HF_HOME", home.path());
    let offline = ModelLookup {
        offline: true,
        ..ModelLookup::default()
    };
    let files = resolve(Some("acme/tiny-bert"), &offline).unwrap();
    assert_eq!(files.dir, snap);
    assert_eq!(files.pooling, Pooling::Cls);
    let err = resolve(Some("acme/absent"), &offline).unwrap_err();
    assert!(err.message.contains("HF_HUB_OFFLINE"), "{}", err.message);
}

/// Word-pieces of `text` the way the tokenizers library gives them for the
/// whole text, truncated at `max_len` (what refscore did before it bounded
/// tokenisation), and whether it had more pieces than that.
fn whole_text_ids(dir: &Path, text: &str, max_len: usize) -> (Vec<u32>, bool) {
    let mut tok = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap();
    tok.with_padding(None);
    tok.with_truncation(Some(TruncationParams {
        max_length: max_len,
        ..TruncationParams::default()
    }))
    .unwrap();
    let enc = tok.encode_fast(text, true).unwrap();
    (enc.get_ids().to_vec(), !enc.get_overflowing().is_empty())
}

#[test]
fn long_texts_are_cut_without_changing_what_the_model_sees() {
    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "mean", 32);
    // Words of one word-piece each; 30 of them + [CLS]/[SEP] fill the limit
    // exactly. A long whitespace run (no pieces) sits among them, so the
    // first prefixes tried hold fewer pieces than the limit and must grow.
    let words = ["paris", "is", "the", "capital", "of", "france", "london"];
    let word = |k: usize| words[(k * 5 + k / 3) % words.len()];
    let run = " ".repeat(1500);
    let mut exact = String::new();
    for k in 0..30 {
        exact.push_str(word(k));
        exact.push_str(match k {
            14 => "\n\t",
            15 => &run,
            _ => " ",
        });
    }
    let exact = exact.trim_end().to_string();
    let mut big = exact.clone();
    let mut k = 30;
    while big.len() < 20 << 20 {
        big.push_str(["  ", "\n", " ", "\t"][k % 4]);
        big.push_str(word(k));
        k += 1;
    }
    let one_more = format!("{exact} london");

    let (exact_ids, exact_over) = whole_text_ids(dir.path(), &exact, 32);
    assert_eq!((exact_ids.len(), exact_over), (32, false));
    let (big_ids, big_over) = whole_text_ids(dir.path(), &big, 32);
    assert!(big_over);
    assert_eq!(big_ids, exact_ids, "the big text starts with the exact one");

    let mut s = stage(dir.path());
    assert_eq!(s.token_ids(&[big.as_str()]).unwrap(), vec![big_ids.clone()]);
    assert_eq!(
        s.token_ids(&[exact.as_str()]).unwrap(),
        vec![exact_ids.clone()]
    );

    // Exactly max_seq_length word-pieces is not truncated.
    let e_exact = s.embed(&[exact.as_str()]).unwrap();
    assert_eq!(s.report().texts_truncated, 0, "a text of exactly the limit");
    let before = s.report().tokenized_bytes;
    let e_big = s.embed(&[big.as_str()]).unwrap();
    assert_eq!(s.report().texts_truncated, 1, "the 20 MB text");
    let handed = s.report().tokenized_bytes - before;
    assert!(
        handed < 64 << 10,
        "{handed} bytes of a 20 MB text went to the tokenizer"
    );
    assert_eq!(e_big[0].ids, big_ids);
    assert_eq!(
        e_big[0].pooled, e_exact[0].pooled,
        "same pieces, same vector"
    );
    assert_eq!(e_big[0].tokens, e_exact[0].tokens);
    s.embed(&[one_more.as_str()]).unwrap();
    assert_eq!(s.report().texts_truncated, 2, "one piece over the limit");
}

#[test]
fn idf_tokenises_each_distinct_reference_once() {
    use arrow::array::StringArray;
    use refscore_core::TextColumn;

    let dir = tempfile::tempdir().unwrap();
    write_model(dir.path(), "mean", 32);
    let mut s = stage(dir.path());
    let long = "the capital of france is paris ".repeat(3);
    let mut rows: Vec<Option<&str>> = vec![Some(long.as_str()); 5000];
    rows.extend([Some("cat"), None, Some("cat")]);
    let column = TextColumn::Utf8(StringArray::from(rows));
    let idf = s.fit_idf(std::iter::once(Ok(column))).unwrap();
    assert_eq!(idf.rows(), 5002, "every non-null reference counts as a row");
    assert_eq!(
        s.report().tokenized_bytes,
        (long.len() + "cat".len()) as u64,
        "each distinct text tokenised once"
    );
}
