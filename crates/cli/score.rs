//! The `score` command: wires reader → metric stages → writer as three
//! threads joined by bounded queues, so reading, scoring and writing overlap
//! and memory stays flat.

use std::path::PathBuf;
use std::time::Instant;

use arrow::array::{AsArray, Float32Array};
use crossbeam_channel::bounded;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use refscore_embed::{EmbedOptions, EmbeddingStage};
use refscore_judge::{Endpoint, JudgeOptions, JudgeStage};
use refscore_read::Role;
use refscore_read::{Dataset, ReadOptions};
use refscore_write::{result_schema, write_atomically, ResultWriter, Summary};
use serde_json::json;

use crate::progress::Progress;
use crate::settings::{Rescale, Settings};

/// Batches in flight between two stages.
const QUEUE: usize = 2;

/// Runs a whole scoring job; returns the summary after the output file and
/// its summary JSON are in place.
pub fn run(settings: &Settings) -> Result<Summary, Error> {
    let start = Instant::now();
    let options = ReadOptions {
        mapping: settings.mapping.clone(),
        keep: settings.keep.clone(),
        batch_size: settings.batch_size,
        row_filter: settings.judge_where.clone(),
    };
    let dataset = Dataset::open(&settings.input, &options)?;
    let lexical = settings.metrics.lexical;
    let mut embed = load_embedding(settings)?;
    let mut judge = load_judge(settings)?;
    let mut metric_fields = refscore_lexical::fields(lexical);
    if let Some(stage) = &embed {
        metric_fields.extend(stage.fields());
    }
    if let Some(stage) = &judge {
        metric_fields.extend(stage.fields());
    }
    let schema = result_schema(dataset.id_field(), &metric_fields, dataset.keep_fields())?;
    let mut writer = ResultWriter::create(
        &settings.output,
        settings.overwrite,
        schema,
        &settings.thresholds,
    )?;
    if let Some(stage) = embed.as_mut() {
        prepare_embedding(stage, &dataset, settings)?;
    }
    let mut progress = Progress::new(dataset.total_rows(), settings.quiet);

    let (read_tx, read_rx) = bounded::<Result<RowBatch, Error>>(QUEUE);
    let (score_tx, score_rx) = bounded::<(RowBatch, ScoreColumns)>(QUEUE);
    let outcome: Result<(), Error> = std::thread::scope(|s| {
        s.spawn(|| {
            for batch in dataset.batches() {
                let failed = batch.is_err();
                if read_tx.send(batch).is_err() || failed {
                    break;
                }
            }
            drop(read_tx);
        });
        let write = s.spawn(|| -> Result<(), Error> {
            for (batch, scores) in score_rx {
                writer.write(&batch, scores)?;
                progress.advance(batch.len() as u64);
            }
            Ok(())
        });
        let mut result = Ok(());
        for batch in read_rx.iter() {
            let batch = match batch {
                Ok(b) => b,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let mut scores = refscore_lexical::score_batch(&batch, lexical);
            if let Some(stage) = embed.as_mut() {
                match stage.score_batch(&batch) {
                    Ok(more) => scores.extend(more),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if let Some(stage) = judge.as_mut() {
                match judge_batch(stage, &batch, &scores, settings) {
                    Ok(more) => scores.extend(more),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if score_tx.send((batch, scores)).is_err() {
                break;
            }
        }
        drop(score_tx);
        drop(read_rx);
        let written = write.join().expect("writer thread panicked");
        result.and(written)
    });
    progress.finish();
    outcome?;
    let stats = writer.finish()?;
    let mut summary = stats.finish(start.elapsed().as_secs_f64());
    summary
        .extra
        .insert("input".into(), settings.input.clone().into());
    summary.extra.insert(
        "output".into(),
        settings.output.display().to_string().into(),
    );
    if let Some(stage) = &embed {
        summary
            .extra
            .insert("embedding".into(), embedding_report(stage));
    }
    if let Some(stage) = &judge {
        let r = stage.report();
        let mut v = refscore_judge::report_json(&r);
        v["seconds_per_judged_row"] = json!(if r.rows_judged > 0 {
            r.call_seconds / r.rows_judged as f64
        } else {
            0.0
        });
        summary.extra.insert("judge".into(), v);
    }
    if let Some(rss) = peak_rss_bytes() {
        summary.extra.insert("peak_rss_bytes".into(), rss.into());
    }
    let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
    write_atomically(&summary_path(&settings.output), &json)?;
    Ok(summary)
}

/// Loads the embedding stage when embedding metrics are wanted. When the
/// user asked for none by name and no model is found, the run goes on
/// without them, with a warning.
fn load_embedding(settings: &Settings) -> Result<Option<EmbeddingStage>, Error> {
    let plan = &settings.metrics;
    if !plan.wants_embedding() {
        return Ok(None);
    }
    let model = settings.embed.model.as_deref();
    if let Err(e) = refscore_embed::resolve(model) {
        if plan.explicit || model.is_some() {
            return Err(e);
        }
        if !settings.quiet {
            eprintln!("refscore: warning: embedding metrics skipped: {e}");
        }
        return Ok(None);
    }
    let options = EmbedOptions {
        model: model.map(str::to_string),
        device: refscore_embed::parse_device(&settings.embed.device)?,
        selection: plan.embedding,
        max_seq_length: settings.embed.max_seq_length,
        cache_bytes: settings.embed.cache_mb << 20,
        store: settings.embed.store.clone(),
        store_outputs: settings.embed.store_outputs,
        ..EmbedOptions::default()
    };
    EmbeddingStage::load(options).map(Some)
}

/// Sets up the judge stage when judge metrics are wanted.
fn load_judge(settings: &Settings) -> Result<Option<JudgeStage>, Error> {
    let (Some(j), true) = (&settings.judge, settings.metrics.wants_judge()) else {
        return Ok(None);
    };
    let api_key = std::env::var(&j.api_key_env).ok().filter(|k| !k.is_empty());
    let endpoint = Endpoint {
        url: j.url.clone(),
        model: j.model.clone(),
        api_key,
        timeout: std::time::Duration::from_secs_f64(j.timeout),
        retries: j.retries,
        concurrency: j.concurrency,
        requests_per_minute: j.rpm,
        tokens_per_minute: j.tpm,
        backoff: std::time::Duration::from_millis(500),
    };
    JudgeStage::new(JudgeOptions {
        endpoint,
        selection: settings.metrics.judge,
        band: j.band,
        cache_dir: j.cache.clone(),
    })
    .map(Some)
}

/// Works out which rows request which judge metrics and judges the batch.
fn judge_batch(
    stage: &mut JudgeStage,
    batch: &RowBatch,
    scores: &ScoreColumns,
    settings: &Settings,
) -> Result<ScoreColumns, Error> {
    let n = batch.len();
    let requested: Vec<[bool; 3]> = match &batch.row_filter {
        None => vec![[true; 3]; n],
        Some(col) => {
            let column = settings.judge_where.as_deref().unwrap_or("");
            (0..n)
                .map(|i| {
                    refscore_judge::requested_by(col, i, &|| {
                        format!(
                            "{}: column '{column}', row {}",
                            batch.source,
                            batch.first_row_in_source + i as u64
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        }
    };
    let cosine: Option<Float32Array> =
        scores
            .fields
            .iter()
            .position(|f| f.name() == "cosine")
            .map(|k| {
                scores.arrays[k]
                    .as_primitive::<arrow::datatypes::Float32Type>()
                    .clone()
            });
    stage.score_batch(batch, &requested, cosine.as_ref())
}

/// The passes some embedding settings need before scoring: IDF over the
/// references, and an automatic rescaling baseline.
fn prepare_embedding(
    stage: &mut EmbeddingStage,
    dataset: &Dataset,
    settings: &Settings,
) -> Result<(), Error> {
    if settings.embed.idf {
        let refs = dataset
            .text_column(Role::Reference)?
            .expect("reference column is always mapped");
        stage.fit_idf(refs)?;
    }
    match settings.embed.rescale {
        Some(Rescale::Given(b)) => stage.set_baseline(b),
        Some(Rescale::Auto) => {
            let pairs = sample_mismatched_pairs(dataset, 1000)?;
            if pairs.len() < 2 {
                return Err(Error::bad_input(format!(
                    "{}: --rescale-baseline auto needs at least 2 scorable rows",
                    settings.input
                )));
            }
            let b = stage.fit_baseline(&pairs)?;
            stage.set_baseline(b);
        }
        None => {}
    }
    Ok(())
}

/// Reservoir-samples up to `k` scorable rows with a fixed seed and pairs
/// each sampled reference with the next sampled row's output, so every pair
/// is mismatched and the same input always gives the same pairs.
fn sample_mismatched_pairs(dataset: &Dataset, k: usize) -> Result<Vec<(String, String)>, Error> {
    let mut state: u64 = 0x5EED_0F_BA5E_u64;
    let mut rand = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut sample: Vec<(String, String)> = Vec::with_capacity(k);
    let mut seen = 0u64;
    for batch in dataset.batches() {
        let batch = batch?;
        for i in 0..batch.len() {
            if batch.unscorable(i).is_some() {
                continue;
            }
            let pair = || {
                (
                    batch.reference.get(i).unwrap_or("").to_string(),
                    batch.output.get(i).unwrap_or("").to_string(),
                )
            };
            seen += 1;
            if sample.len() < k {
                sample.push(pair());
            } else {
                let j = rand() % seen;
                if (j as usize) < k {
                    sample[j as usize] = pair();
                }
            }
        }
    }
    let n = sample.len();
    Ok((0..n)
        .map(|i| (sample[i].0.clone(), sample[(i + 1) % n].1.clone()))
        .collect())
}

fn embedding_report(stage: &EmbeddingStage) -> serde_json::Value {
    let r = stage.report();
    let files = stage.model_files();
    let forward = r.forward.as_secs_f64();
    json!({
        "model": files.dir.display().to_string(),
        "pooling": format!("{:?}", files.pooling).to_lowercase(),
        "max_seq_length": stage.max_seq_length(),
        "idf_rows": stage.idf().map(|i| i.rows()),
        "baseline": stage.baseline(),
        "texts_embedded": r.texts_embedded,
        "texts_reused": r.texts_reused,
        "texts_truncated": r.texts_truncated,
        "tokens": r.tokens,
        "padded_tokens": r.padded_tokens,
        "tokenize_seconds": r.tokenize.as_secs_f64(),
        "forward_seconds": forward,
        "tokens_per_second": if forward > 0.0 { r.tokens as f64 / forward } else { 0.0 },
        "embed_cache": stage.store_dir().map(|d| json!({
            "dir": d.display().to_string(),
            "hits": r.store_hits,
            "writes": r.store_writes,
        })),
    })
}

/// `<output>.summary.json`.
pub fn summary_path(output: &std::path::Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".summary.json");
    PathBuf::from(name)
}

/// Peak resident memory of this process so far (Linux: VmHWM).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
