//! Tokenisation with the tokenizer kinds beyond WordPiece, on the committed
//! tiny model folders of tests/fixtures/models (scripts/fixtures/make-tiny-models.py):
//! byte-level BPE (RoBERTa) and Unigram with Metaspace (XLM-R, and a BERT
//! body with XLM-R's kind of tokenizer). A 4 MB text (16 times the bound
//! on what reaches the tokenizer) is never tokenised whole, yet the model sees exactly the pieces of the whole text; and
//! BERTScore's own encoding (stripped, byte-level BPE's prefix space) is what
//! the texts are matched on.

use std::path::PathBuf;

use refscore_embed::{EmbedOptions, EmbeddingStage, Prompt};
use tokenizers::{Tokenizer, TruncationParams};

fn folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/models")
        .join(name)
}

fn stage(name: &str, max_len: usize, prompt: Option<Prompt>) -> EmbeddingStage {
    EmbeddingStage::load(EmbedOptions {
        model: Some(folder(name).to_str().unwrap().to_string()),
        max_seq_length: Some(max_len),
        prompt,
        ..EmbedOptions::default()
    })
    .unwrap()
}

/// The tokenizers library's ids for the whole text, truncated at `max_len`.
fn whole(name: &str, text: &str, max_len: usize) -> Vec<u32> {
    let mut tok = Tokenizer::from_file(folder(name).join("tokenizer.json")).unwrap();
    tok.with_padding(None);
    tok.with_truncation(Some(TruncationParams {
        max_length: max_len,
        ..TruncationParams::default()
    }))
    .unwrap();
    tok.encode_fast(text, true).unwrap().get_ids().to_vec()
}

/// A text of about 4 MB of words with every kind of whitespace run
/// between them, including runs longer than the first prefix.
fn big_text() -> String {
    let words = [
        "Paris", "is", "the", "capital", "of", "France.", "Zürich", "東京", "café", "42",
    ];
    let gaps = [" ", "  ", "\n", "\t ", " \u{3000} ", "\r\n"];
    let mut text = String::new();
    let mut k = 0;
    while text.len() < 4 << 20 {
        text.push_str(words[(k * 7 + k / 5) % words.len()]);
        let long_run = " ".repeat(300);
        text.push_str(if k == 40 {
            &long_run
        } else {
            gaps[k % gaps.len()]
        });
        k += 1;
    }
    text
}

/// Equal up to the rounding of a different batch around the same text.
fn close(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-5)
}

#[test]
fn a_4_mb_text_is_cut_yet_every_tokenizer_kind_sees_the_whole_texts_pieces() {
    let big = big_text();
    for name in ["tiny-roberta", "tiny-xlm-roberta", "tiny-bert-unigram"] {
        let mut s = stage(name, 128, None);
        assert_eq!(
            s.token_ids(&[big.as_str()]).unwrap(),
            vec![whole(name, &big, 128)],
            "{name}: the model's pieces are the whole text's"
        );
        let e = s.embed(&[big.as_str()]).unwrap();
        let handed = s.report().tokenized_bytes;
        assert!(
            handed < 256 << 10,
            "{name}: {handed} bytes of a 4 MB text went to the tokenizer"
        );
        assert_eq!(s.report().texts_truncated, 1, "{name}");
        // BERTScore's encoding of the same text: stripped, and for
        // byte-level BPE with the prefix space; also bounded.
        let scored = if name == "tiny-roberta" {
            whole(name, &format!(" {}", big.trim()), 128)
        } else {
            whole(name, big.trim(), 128)
        };
        assert_eq!(e[0].ids, scored, "{name}: BERTScore's pieces");
    }
}

#[test]
fn bertscore_matches_its_own_encoding_and_never_the_prompt() {
    // Byte-level BPE: the prefix space makes BERTScore's ids differ from
    // the sentence embedding's for every text.
    let mut s = stage("tiny-roberta", 128, None);
    let text = "Paris is the capital";
    let e = s.embed(&[text]).unwrap();
    assert_ne!(s.token_ids(&[text]).unwrap()[0], e[0].ids);
    assert_eq!(
        e[0].ids,
        whole("tiny-roberta", " Paris is the capital", 128)
    );
    // Surrounding whitespace: kept for the sentence embedding (as
    // sentence-transformers 6 does), stripped for BERTScore.
    let e = s.embed(&[text, "  Paris is the capital \n"]).unwrap();
    assert_eq!(e[1].ids, e[0].ids, "stripped for BERTScore");
    assert!(
        close(&e[1].tokens, &e[0].tokens),
        "and run as the stripped text"
    );
    assert_ne!(e[1].pooled, e[0].pooled, "the sentence embedding keeps it");
    // Unigram after a whitespace split: one sequence serves both.
    let mut s = stage("tiny-xlm-roberta", 128, None);
    let e = s.embed(&[text]).unwrap();
    assert_eq!(e[0].ids, s.token_ids(&[text]).unwrap()[0]);
    // A prompt goes before the sentence embedding's text only.
    let mut plain = stage("tiny-bert-unigram", 128, None);
    let mut prompted = stage(
        "tiny-bert-unigram",
        128,
        Some(Prompt::Text("query: ".into())),
    );
    let a = plain.embed(&[text]).unwrap();
    let b = prompted.embed(&[text]).unwrap();
    assert_eq!(a[0].ids, b[0].ids);
    assert!(close(&a[0].tokens, &b[0].tokens));
    assert_ne!(a[0].pooled, b[0].pooled);
    let summary = refscore_core::Stage::summary(&prompted).unwrap().1;
    assert_eq!(summary["prompt"], "query: ");
    assert!(prompted.token_ids(&[text]).unwrap()[0].len() > a[0].ids.len());
}

#[test]
fn a_prompt_name_the_folder_lacks_is_explained() {
    let err = EmbeddingStage::load(EmbedOptions {
        model: Some(folder("tiny-roberta").to_str().unwrap().to_string()),
        prompt: Some(Prompt::Named("passage".into())),
        ..EmbedOptions::default()
    })
    .err()
    .expect("refused");
    assert!(
        err.message.contains("--prompt-name passage") && err.message.contains("document, query"),
        "{}",
        err.message
    );
}
