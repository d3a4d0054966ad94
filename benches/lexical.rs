//! Lexical-only scoring, end to end through the real binary, on generated
//! nightly-style files of 1M and 10M rows. Prints rows/s and peak RSS so the
//! throughput target (≥ 1M rows/s on 2 cores) and flat memory (within 20%
//! from 1M to 10M rows) can be checked side by side in one run.
//!
//! Run: `cargo bench --bench lexical` (set `REFSCORE_BENCH_ROWS=1000000,10000000`
//! to choose sizes). `REFSCORE_BENCH_BASELINE_BIN=/path/to/refscore` also times
//! another build, alternating runs (`REFSCORE_BENCH_REPEAT`, default 5), and
//! prints the ratio: how checkpointing's cost was measured.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

const ANSWERS: &[(&str, &[&str])] = &[
    (
        "Paris",
        &[
            "Paris",
            "paris.",
            "The capital is Paris.",
            "Lyon",
            "I think it's Paris, but maybe Marseille",
        ],
    ),
    (
        "one hundred",
        &[
            "100",
            "one hundred",
            "a hundred",
            "101",
            "about a hundred and ten",
        ],
    ),
    (
        "Leonardo da Vinci",
        &[
            "Da Vinci",
            "Leonardo da Vinci",
            "Michelangelo",
            "It was painted by Leonardo da Vinci.",
        ],
    ),
    (
        "The mitochondria produce ATP",
        &[
            "Mitochondria make ATP.",
            "the mitochondria produce atp",
            "Ribosomes make proteins",
        ],
    ),
    ("forty-two", &["42", "Forty two", "The answer is 42.", "24"]),
    (
        "Amy likes apples and bananas",
        &[
            "Amy likes apples, berries and plums",
            "apples and bananas",
            "Amy likes apples and bananas.",
        ],
    ),
    ("1969", &["1969", "In 1969.", "nineteen sixty-nine", "1968"]),
    (
        "Take 500 mg twice a day with food.",
        &[
            "500 mg twice daily with food",
            "Take 500mg two times a day.",
            "Take 50 mg once a day.",
        ],
    ),
];

fn generate(path: &Path, rows: usize) {
    if path.exists() {
        return;
    }
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("reference", DataType::Utf8, true),
        Field::new("output", DataType::Utf8, true),
    ]));
    let tmp = path.with_extension("tmp");
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(&tmp).unwrap(), schema.clone(), Some(props)).unwrap();
    let chunk = 100_000;
    let mut state: u64 = 0x9E3779B97F4A7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for start in (0..rows).step_by(chunk) {
        let n = chunk.min(rows - start);
        let mut ids = Vec::with_capacity(n);
        let mut refs = Vec::with_capacity(n);
        let mut outs = Vec::with_capacity(n);
        for i in start..start + n {
            let (r, variants) = ANSWERS[(next() % ANSWERS.len() as u64) as usize];
            ids.push(format!("row-{i}"));
            refs.push(r.to_string());
            outs.push(variants[(next() % variants.len() as u64) as usize].to_string());
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(ids)) as ArrayRef,
                Arc::new(StringArray::from(refs)),
                Arc::new(StringArray::from(outs)),
            ],
        )
        .unwrap();
        w.write(&batch).unwrap();
    }
    w.close().unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// One timed run of `bin` on `input`: wall seconds and peak RSS (bytes).
fn time_run(bin: &str, input: &Path, output: &Path) -> (f64, u64) {
    let _ = std::fs::remove_file(output);
    let start = Instant::now();
    let status = Command::new(bin)
        .args([
            "score",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--overwrite",
            "--quiet",
            "--metrics",
            "lexical",
        ])
        .status()
        .unwrap();
    let seconds = start.elapsed().as_secs_f64();
    assert!(status.success(), "{bin} failed");
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.summary.json", output.display())).unwrap(),
    )
    .unwrap();
    (seconds, summary["peak_rss_bytes"].as_u64().unwrap())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let sizes: Vec<usize> = std::env::var("REFSCORE_BENCH_ROWS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("row count"))
        .collect();
    // A second binary (e.g. a build of an earlier commit) timed side by side,
    // alternating runs, so a ratio comes from one sitting on one machine.
    let baseline = std::env::var("REFSCORE_BENCH_BASELINE_BIN").ok();
    let repeat: usize = std::env::var("REFSCORE_BENCH_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if baseline.is_some() { 5 } else { 1 });
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bench-lexical");
    std::fs::create_dir_all(&dir).unwrap();
    let mut bins = vec![("this build", env!("CARGO_BIN_EXE_refscore").to_string())];
    if let Some(b) = &baseline {
        bins.push(("baseline", b.clone()));
    }
    println!(
        "{:>10} {:>11} {:>12} {:>10} {:>12}   (median of {repeat})",
        "rows", "binary", "rows/s", "seconds", "peak RSS"
    );
    let mut first_rss = None;
    for rows in sizes {
        let input = dir.join(format!("nightly-{rows}.parquet"));
        generate(&input, rows);
        let output = dir.join(format!("scores-{rows}.parquet"));
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); bins.len()];
        let mut rss: Vec<u64> = vec![0; bins.len()];
        for _ in 0..repeat {
            for (k, (_, bin)) in bins.iter().enumerate() {
                let (t, r) = time_run(bin, &input, &output);
                times[k].push(t);
                rss[k] = rss[k].max(r);
            }
        }
        let medians: Vec<f64> = times.into_iter().map(median).collect();
        for (k, (name, _)) in bins.iter().enumerate() {
            let rss_ratio = if k == 0 {
                let r = first_rss
                    .map(|f: u64| format!("  ({:.2}x the first size)", rss[0] as f64 / f as f64))
                    .unwrap_or_default();
                first_rss.get_or_insert(rss[0]);
                r
            } else {
                format!(
                    "  (this build takes {:.3}x its time)",
                    medians[0] / medians[k]
                )
            };
            println!(
                "{:>10} {:>11} {:>12.0} {:>10.2} {:>9.1} MiB{rss_ratio}",
                rows,
                name,
                rows as f64 / medians[k],
                medians[k],
                rss[k] as f64 / (1024.0 * 1024.0),
            );
        }
    }
}
