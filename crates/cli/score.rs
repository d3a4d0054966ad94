//! The `score` command: wires reader → metric stages → writer as three
//! threads joined by bounded queues, so reading, scoring and writing overlap
//! and memory stays flat.

use std::path::PathBuf;
use std::time::Instant;

use crossbeam_channel::bounded;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use refscore_read::{Dataset, ReadOptions};
use refscore_write::{result_schema, write_atomically, ResultWriter, Summary};

use crate::progress::Progress;
use crate::settings::Settings;

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
    };
    let dataset = Dataset::open(&settings.input, &options)?;
    let lexical = settings.metrics.lexical;
    let metric_fields = refscore_lexical::fields(lexical);
    let schema = result_schema(dataset.id_field(), &metric_fields, dataset.keep_fields())?;
    let mut writer = ResultWriter::create(&settings.output, settings.overwrite, schema, &settings.thresholds)?;
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
            let scores = refscore_lexical::score_batch(&batch, lexical);
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
    summary.extra.insert("input".into(), settings.input.clone().into());
    summary.extra.insert("output".into(), settings.output.display().to_string().into());
    if let Some(rss) = peak_rss_bytes() {
        summary.extra.insert("peak_rss_bytes".into(), rss.into());
    }
    let json = serde_json::to_string_pretty(&summary).expect("summary serialises");
    write_atomically(&summary_path(&settings.output), &json)?;
    Ok(summary)
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
