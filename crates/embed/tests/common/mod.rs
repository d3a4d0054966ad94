//! What the embed crate's parity tests share: the fixtures folder, the
//! reference libraries' jsonl files and the pairs they score.

#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// The repository's `tests/fixtures`.
pub fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

/// A fixture jsonl file: its header line's `header` and the rows after it.
pub fn jsonl(file: &str) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(fixtures().join(file)).unwrap();
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap();
    (header["header"].clone(), lines.collect())
}

/// Each row's (reference, output) pair.
pub fn pairs(rows: &[Value]) -> Vec<(&str, &str)> {
    rows.iter()
        .map(|r| {
            (
                r["reference"].as_str().unwrap(),
                r["output"].as_str().unwrap(),
            )
        })
        .collect()
}
