//! A span detector as the cross stage: each distinct (reference, question,
//! output) row of a batch goes through [`SpanDetector`] once; the row gets
//! `cross_score` (its support: 1 − the detector's score, so that, as for
//! every cross model, higher means better supported and bands, `report` and
//! `calibrate-band` read it in the registry's direction) and `cross_spans`
//! (its unsupported spans of the output, with the detector's own
//! probabilities). Detections are kept in the same memory cache and
//! `--embed-cache` store as a sequence classifier's scores, under keys of
//! their own.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, Float32Array, Float32Builder, Int32Builder, ListBuilder, StringBuilder, StructBuilder,
};
use arrow::datatypes::{DataType, Field, Fields};
use refscore_core::metric;
use refscore_core::{Error, RowBatch, ScoreColumns, Stage};
use serde_json::{json, Value};

use super::memo::Memo;
use super::pair_store::PairStore;
use super::spans::{self, Detected, Refused, Span, SpanDetector};
use super::{CrossFolder, CrossOptions, CrossReport};

/// The column of a span detector's unsupported spans.
pub const CROSS_SPANS: &str = "cross_spans";

/// `cross_spans`' struct: character offsets into the output, the text,
/// the span's confidence.
fn span_fields() -> Fields {
    Fields::from(vec![
        Field::new("start", DataType::Int32, false),
        Field::new("end", DataType::Int32, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("score", DataType::Float32, false),
    ])
}

/// `cross_spans`: list<struct{start: int32, end: int32, text: utf8,
/// score: float32}>, null where the row was not scored.
pub fn spans_field() -> Field {
    Field::new(
        CROSS_SPANS,
        DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(span_fields()),
            true,
        ))),
        true,
    )
}

/// The span detector's stage.
pub struct SpanStage {
    folder: CrossFolder,
    detector: SpanDetector,
    report: CrossReport,
    /// Rows the detector could not read (answers too long).
    refused: u64,
    /// Spans found.
    spans: u64,
    /// Detections by prompt and answer, in memory and kept between runs.
    memo: Memo,
}

impl SpanStage {
    /// Loads `folder`'s token classifier as a span detector.
    pub fn load(folder: CrossFolder, options: &CrossOptions) -> Result<SpanStage, Error> {
        let detector = SpanDetector::load(&folder.files.dir, options)?;
        let store = match &options.store {
            Some(root) => Some(PairStore::open(root, &folder, options, false)?),
            None => None,
        };
        Ok(SpanStage {
            folder,
            detector,
            report: CrossReport::default(),
            refused: 0,
            spans: 0,
            memo: Memo::new(options.cache_bytes, store),
        })
    }

    /// The detections of `rows` (prompt, answer), from the cache, the
    /// store or the detector, each encoded as [`encode`] keeps it.
    fn detections(&mut self, rows: &[(&str, &str)]) -> Result<Vec<Arc<Vec<f32>>>, Error> {
        let keys: Vec<String> = rows
            .iter()
            .map(|(p, a)| format!("t{}:{p}{a}", p.len()))
            .collect();
        let detector = &self.detector;
        self.memo
            .values(&keys, &mut self.report, |missing, report| {
                let asked: Vec<(&str, &str)> = missing.iter().map(|&k| rows[k]).collect();
                Ok(detector
                    .detect(&asked, report)?
                    .iter()
                    .map(encode)
                    .collect())
            })
    }
}

/// A detection as the cache keeps it: [score, n, (start, end, confidence)
/// × n]; a refused row as [NaN, answer tokens, limit]. The spans' texts
/// are read again from the output.
fn encode(d: &Detected) -> Vec<f32> {
    match d {
        Err(r) => vec![f32::NAN, r.answer_tokens as f32, r.max_length as f32],
        Ok(d) => {
            let mut v = vec![d.score, d.spans.len() as f32];
            for s in &d.spans {
                v.extend([s.start as f32, s.end as f32, s.confidence]);
            }
            v
        }
    }
}

/// The row's score and spans from a kept detection, or why it was refused.
fn decode(v: &[f32], output: &str) -> Result<(f32, Vec<Span>), Refused> {
    if v[0].is_nan() {
        return Err(Refused {
            answer_tokens: v[1] as usize,
            max_length: v[2] as usize,
        });
    }
    let chars: Vec<char> = output.chars().collect();
    let spans = v[2..]
        .chunks_exact(3)
        .map(|c| {
            let (start, end) = (c[0] as u32, c[1] as u32);
            let (s, e) = (
                (start as usize).min(chars.len()),
                (end as usize).min(chars.len()),
            );
            Span {
                start,
                end,
                text: chars[s..e.max(s)].iter().collect(),
                confidence: c[2],
            }
        })
        .collect();
    Ok((v[0], spans))
}

impl Stage for SpanStage {
    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new(metric::CROSS_SCORE.name.clone(), DataType::Float32, true),
            spans_field(),
        ]
    }

    /// Rows that cannot be scored (see [`RowBatch::unscorable`]) get nulls;
    /// a row the detector refuses gets nulls and its reason (status
    /// `partial`).
    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        let mut index: HashMap<(String, &str), usize> = HashMap::new();
        let mut rows: Vec<(String, &str)> = Vec::new();
        let at: Vec<Option<usize>> = (0..n)
            .map(|i| {
                batch.unscorable(i).is_none().then(|| {
                    let question = batch.input.as_ref().and_then(|q| q.get(i));
                    let reference = batch.reference().get(i).expect("scorable");
                    let key = (
                        spans::prompt(reference, question),
                        batch.output().get(i).expect("scorable"),
                    );
                    let next = rows.len();
                    *index.entry(key.clone()).or_insert_with(|| {
                        rows.push(key);
                        next
                    })
                })
            })
            .collect();
        let asked: Vec<(&str, &str)> = rows.iter().map(|(p, a)| (p.as_str(), *a)).collect();
        let found = self.detections(&asked)?;
        let mut scores = Float32Builder::with_capacity(n);
        let mut lists = ListBuilder::new(StructBuilder::from_fields(span_fields(), 0)).with_field(
            match spans_field().data_type() {
                DataType::List(item) => Arc::clone(item),
                _ => unreachable!("cross_spans is a list"),
            },
        );
        let mut out = ScoreColumns::default();
        for (i, k) in at.iter().enumerate() {
            let decoded = k.map(|k| decode(&found[k], rows[k].1));
            match decoded {
                Some(Ok((score, spans))) => {
                    // The detector's score is LettuceDetect's hallucination
                    // probability (lower is better); the column is its
                    // complement (see the module docs).
                    scores.append_value(1.0 - score);
                    let items = lists.values();
                    for s in &spans {
                        items
                            .field_builder::<Int32Builder>(0)
                            .expect("start")
                            .append_value(s.start as i32);
                        items
                            .field_builder::<Int32Builder>(1)
                            .expect("end")
                            .append_value(s.end as i32);
                        items
                            .field_builder::<StringBuilder>(2)
                            .expect("text")
                            .append_value(&s.text);
                        items
                            .field_builder::<Float32Builder>(3)
                            .expect("score")
                            .append_value(s.confidence);
                        items.append(true);
                    }
                    self.spans += spans.len() as u64;
                    lists.append(true);
                }
                Some(Err(refused)) => {
                    self.refused += 1;
                    out.fail_row(n, i, refused.message());
                    scores.append_null();
                    lists.append(false);
                }
                None => {
                    scores.append_null();
                    lists.append(false);
                }
            }
        }
        let scores: Float32Array = scores.finish();
        out.push(
            Field::new(metric::CROSS_SCORE.name.clone(), DataType::Float32, true),
            Arc::new(scores) as ArrayRef,
        );
        out.push(spans_field(), Arc::new(lists.finish()) as ArrayRef);
        Ok(out)
    }

    /// The model, the detector's settings and the run's counters.
    fn summary(&self) -> Option<(&'static str, Value)> {
        let f = &self.folder;
        let r = &self.report;
        let forward = r.forward.as_secs_f64();
        Some((
            "cross",
            json!({
                "model": f.files.dir.display().to_string(),
                "family": f.files.family,
                "architecture": f.architecture,
                "labels": f.labels,
                "head": "tokens",
                "detector": spans::DETECTOR,
                "activation_from": f.activation_from,
                "max_length": self.detector.max_length(),
                "pairs_scored": r.pairs,
                "pairs_chunked": r.chunked,
                "chunks_scored": r.inputs,
                "pairs_truncated": r.truncated,
                "pairs_refused": self.refused,
                "pairs_reused": r.reused,
                "pairs_from_embed_cache": r.from_store,
                "spans": self.spans,
                "tokens": r.tokens,
                "forward_seconds": forward,
                "pairs_per_second": if forward > 0.0 { r.pairs as f64 / forward } else { 0.0 },
            }),
        ))
    }
}
