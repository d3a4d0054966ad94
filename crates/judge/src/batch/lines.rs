//! Request and result files, whatever the backend's line format: the spool
//! of a pass split into request files at the backend's limits, the
//! `custom_id`s a request file holds, and result files read a line at a
//! time, matched to requests by `custom_id`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use refscore_core::Error;
use serde_json::Value;

/// One request file written from the spool.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub path: PathBuf,
    pub lines: u64,
    pub bytes: u64,
}

/// Splits the spool into request files of at most `max_lines` lines and
/// `max_bytes` bytes, named by `name(k)` for k = 0, 1, … in `dir`; each
/// file is made durable before the next begins.
pub(crate) fn split(
    spool: &Path,
    dir: &Path,
    (max_lines, max_bytes): (usize, u64),
    name: impl Fn(usize) -> String,
) -> Result<Vec<Written>, Error> {
    let io = |p: &Path, e: std::io::Error| Error::io(format!("{}: {e}", p.display()));
    let reader = BufReader::new(File::open(spool).map_err(|e| io(spool, e))?);
    let mut out: Vec<Written> = Vec::new();
    let mut current: Option<(BufWriter<File>, Written)> = None;
    for line in reader.lines() {
        let line = line.map_err(|e| io(spool, e))?;
        let len = line.len() as u64 + 1;
        if len > max_bytes {
            return Err(Error::config(format!(
                "a judge request of {len} bytes is over the batch file limit of {max_bytes} bytes"
            )));
        }
        let full = current
            .as_ref()
            .is_some_and(|(_, w)| w.lines as usize >= max_lines || w.bytes + len > max_bytes);
        if full {
            out.push(finish(current.take().expect("open"))?);
        }
        let (file, w) = match current.as_mut() {
            Some(c) => c,
            None => {
                let path = dir.join(name(out.len()));
                let file = File::create(&path).map_err(|e| io(&path, e))?;
                let w = Written {
                    path,
                    lines: 0,
                    bytes: 0,
                };
                current.insert((BufWriter::new(file), w))
            }
        };
        writeln!(file, "{line}").map_err(|e| io(&w.path, e))?;
        w.lines += 1;
        w.bytes += len;
    }
    if let Some(c) = current {
        out.push(finish(c)?);
    }
    Ok(out)
}

fn finish((file, w): (BufWriter<File>, Written)) -> Result<Written, Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", w.path.display()));
    let file = file.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(w)
}

/// The `custom_id`s of a request file, in order.
pub(crate) fn request_ids(path: &Path) -> Result<Vec<String>, Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", path.display()));
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut ids = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(io)?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| Error::internal(format!("{}: not a request line: {e}", path.display())))?;
        ids.push(v["custom_id"].as_str().unwrap_or_default().to_string());
    }
    Ok(ids)
}

/// A backend's reading of one result line: its `custom_id` and outcome,
/// `None` for a blank line, an error saying what is wrong.
pub(crate) type ReadResult = fn(&str) -> Result<Option<(String, Outcome)>, String>;

/// A backend's request line: `custom_id` and the body an online call
/// would send, in the backend's format.
pub(crate) type RequestLine = fn(&str, &Value) -> String;

/// What a result line says of its request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The chat completion, as an online call would have received it.
    Answer(Value),
    /// No answer: the response's HTTP status where there was one, and the
    /// provider's message.
    Failed(Option<u16>, String),
}

/// Hands every result line of a file to `each`, in order, one at a time (a
/// file may hold 200 MB); a line that cannot be read is an error naming the
/// file and line.
pub(crate) fn read_results(
    path: &Path,
    read_result: ReadResult,
    mut each: impl FnMut(String, Outcome) -> Result<(), Error>,
) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", path.display()));
    let reader = BufReader::new(File::open(path).map_err(io)?);
    for (k, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        match read_result(&line) {
            Ok(Some((id, outcome))) => each(id, outcome)?,
            Ok(None) => {}
            Err(e) => {
                return Err(Error::bad_input(format!(
                    "{}: line {}: {e}",
                    path.display(),
                    k + 1
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_spool_splits_at_the_line_and_byte_limits() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool.jsonl");
        let lines: Vec<String> = (0..7)
            .map(|k| json!({"custom_id": format!("id{k}"), "k": "x".repeat(k * 10)}).to_string())
            .collect();
        std::fs::write(&spool, lines.join("\n") + "\n").unwrap();
        let name = |k: usize| format!("requests-{:03}.jsonl", k + 1);
        let by_lines = split(&spool, dir.path(), (3, u64::MAX), name).unwrap();
        assert_eq!(
            by_lines.iter().map(|w| w.lines).collect::<Vec<_>>(),
            [3, 3, 1]
        );
        let back: Vec<String> = by_lines
            .iter()
            .flat_map(|w| request_ids(&w.path).unwrap())
            .collect();
        assert_eq!(back, (0..7).map(|k| format!("id{k}")).collect::<Vec<_>>());
        // Bytes: each file under the limit, every line kept in order.
        let limit = lines[5].len() as u64 + lines[6].len() as u64 + 1;
        let by_bytes = split(&spool, dir.path(), (100, limit), name).unwrap();
        assert!(by_bytes.len() > 1);
        for w in &by_bytes {
            let bytes = std::fs::metadata(&w.path).unwrap().len();
            assert_eq!(bytes, w.bytes);
            assert!(bytes <= limit, "{bytes} > {limit}");
        }
        assert_eq!(by_bytes.iter().map(|w| w.lines).sum::<u64>(), 7);
        let too_small = split(&spool, dir.path(), (100, 10), name).unwrap_err();
        assert!(
            too_small.message.contains("over the batch file limit"),
            "{}",
            too_small.message
        );
    }
}
