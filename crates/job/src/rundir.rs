//! The run folder beside the output, the run's fingerprint, and the checks
//! on the output path made before any work starts.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use refscore_core::Error;
use refscore_read::Dataset;
use refscore_write::{parent_dir, read_part, summary_path, sync_dir, PartInfo};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::record::{self, Unreadable};
use crate::{JobSpec, RUN_KEY};

const MANIFEST: &str = "run.json";
const LOCK: &str = "run.lock";

/// `.<output name>.refscore-run` beside the output.
pub(crate) fn path_for(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    parent_dir(output).join(format!(".{name}.refscore-run"))
}

/// Refuses outputs that would destroy something or fail only at the end: a
/// folder, a device or FIFO, a missing folder, one of the input files, or a
/// summary path that is a folder.
pub(crate) fn check_output(output: &Path, dataset: &Dataset) -> Result<(), Error> {
    let shown = output.display();
    let dir = parent_dir(output);
    if !dir.is_dir() {
        return Err(Error::io(format!(
            "{shown}: output directory {} does not exist",
            dir.display()
        )));
    }
    if let Ok(meta) = fs::metadata(output) {
        if meta.is_dir() {
            return Err(Error::config(format!(
                "{shown}: output path is a directory; give a file name"
            )));
        }
        if !meta.is_file() {
            return Err(Error::config(format!(
                "{shown}: output is not a regular file (a device or FIFO); refscore writes a Parquet file and a summary beside it, so give a file path"
            )));
        }
        for input in dataset.files() {
            if same_file(output, &input.path) {
                return Err(Error::config(format!(
                    "{shown}: the output is one of the input files; refusing to replace it even with --overwrite"
                )));
            }
        }
    }
    let summary = summary_path(output);
    if summary.is_dir() {
        return Err(Error::config(format!(
            "{}: the summary path is a directory",
            summary.display()
        )));
    }
    // Can we write there? Find out now, not after hours of scoring.
    tempfile::Builder::new()
        .prefix(".refscore-probe")
        .tempfile_in(&dir)
        .map_err(|e| {
            Error::io(format!(
                "{shown}: cannot write in the output directory {}: {e}",
                dir.display()
            ))
        })?;
    Ok(())
}

/// Removes the temporaries a killed run of this output may have left while
/// writing the result or its summary (`.<name>.*.partial`, regular files
/// only): they are refscore's own and never hold anything finished.
pub(crate) fn remove_stale_temporaries(output: &Path) {
    let Some(name) = output.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return;
    };
    let prefix = format!(".{name}.");
    let Ok(entries) = fs::read_dir(parent_dir(output)) else {
        return;
    };
    let tombstones = format!(".{name}.refscore-run.gone-");
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        let Ok(kind) = e.file_type() else { continue };
        if n.starts_with(&prefix) && n.ends_with(".partial") && kind.is_file() {
            let _ = fs::remove_file(e.path());
        } else if n.starts_with(&tombstones) && kind.is_dir() {
            let _ = fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(unix)]
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (fs::metadata(a), fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Everything that identifies a job's results, as a versioned record
/// ([`record::FORMAT`]) naming the chosen metrics: nothing in it depends
/// on the metrics refscore has built in beyond those the run chose.
pub(crate) fn fingerprint(dataset: &Dataset, spec: &JobSpec) -> Value {
    let inputs: Vec<Value> = dataset
        .files()
        .iter()
        .map(|f| {
            json!({
                "path": f.path.display().to_string(),
                "size": f.size,
                "modified": f.modified,
                "footer_sha256": f.footer_sha256,
            })
        })
        .collect();
    let settings: Map<String, Value> = spec
        .settings
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // A threshold of a metric the run does not compute changes nothing.
    let thresholds: Vec<&(String, f64)> = (spec.thresholds.iter())
        .filter(|(name, _)| spec.metrics.contains(name))
        .collect();
    let mut out = json!({
        "format": record::FORMAT,
        "inputs": inputs,
        "shard": spec.shard.map(|s| s.to_string()),
        "metrics": spec.metrics,
        "thresholds": thresholds,
        "settings": settings,
    });
    // Only where the input is a Delta table: runs of plain files keep the
    // fingerprint they had before tables were read, and still resume.
    if let Some(version) = dataset.table_version() {
        out["table_version"] = json!(version);
    }
    out
}

pub(crate) fn hash(fingerprint: &Value) -> String {
    let text = serde_json::to_string(fingerprint).expect("serialises");
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// The fingerprint hash a finished result file records, if any.
pub(crate) fn output_hash(output: &Path) -> Option<String> {
    let file = File::open(output).ok()?;
    let meta = parquet::file::metadata::ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .ok()?;
    meta.file_metadata()
        .key_value_metadata()?
        .iter()
        .find(|k| k.key == RUN_KEY)?
        .value
        .clone()
}

/// An open run folder, locked against a second process.
pub(crate) struct RunDir {
    path: PathBuf,
    _lock: File,
}

impl RunDir {
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn lock(path: &Path) -> Result<File, Error> {
        let lock_path = path.join(LOCK);
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| Error::io(format!("{}: {e}", lock_path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(fs::TryLockError::WouldBlock) => Err(Error::temporary(format!(
                "{}: another refscore process is running this job",
                path.display()
            ))),
            Err(fs::TryLockError::Error(e)) => Err(Error::io(format!(
                "{}: cannot lock: {e}",
                lock_path.display()
            ))),
        }
    }

    /// Starts a new run folder holding the fingerprint.
    pub(crate) fn create(path: &Path, fingerprint: &Value) -> Result<RunDir, Error> {
        fs::create_dir(path)
            .map_err(|e| Error::io(format!("{}: cannot create: {e}", path.display())))?;
        RunDir::start(path, fingerprint).inspect_err(|_| {
            // Half-made: no leftover that would look like an interrupted run.
            let _ = fs::remove_dir_all(path);
        })
    }

    fn start(path: &Path, fingerprint: &Value) -> Result<RunDir, Error> {
        let lock = RunDir::lock(path)?;
        let manifest = json!({
            "about": "progress of an interrupted refscore run; `refscore score ... --resume` finishes it, --overwrite discards it",
            "fingerprint": fingerprint,
        });
        let text = serde_json::to_string_pretty(&manifest).expect("serialises");
        refscore_core::files::write_atomically(&path.join(MANIFEST), text.as_bytes())
            .map_err(|e| Error::io(format!("{}: {e}", path.join(MANIFEST).display())))?;
        sync_dir(path)?;
        sync_dir(&parent_dir(path))?;
        Ok(RunDir {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// Opens an existing run folder.
    pub(crate) fn open(path: &Path) -> Result<RunDir, Error> {
        let lock = RunDir::lock(path)?;
        Ok(RunDir {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    /// Removes a run folder (it holds only what refscore wrote). It is first
    /// renamed out of the way in one step, so a kill while deleting leaves a
    /// tombstone that the next run clears, never a half-deleted run that
    /// would look interrupted.
    pub(crate) fn discard(path: &Path) -> Result<(), Error> {
        let mut tomb = path.as_os_str().to_owned();
        tomb.push(format!(".gone-{}", std::process::id()));
        let tomb = PathBuf::from(tomb);
        match fs::rename(path, &tomb) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(format!("{}: cannot remove: {e}", path.display()))),
        }
        let _ = sync_dir(&parent_dir(path));
        fs::remove_dir_all(&tomb)
            .map_err(|e| Error::io(format!("{}: cannot remove: {e}", tomb.display())))
    }

    /// Rows in the committed parts of a run folder, for messages.
    pub(crate) fn committed_rows(path: &Path) -> u64 {
        part_paths(path)
            .iter()
            .filter_map(|p| read_part(p).ok())
            .map(|p| p.rows)
            .sum()
    }

    /// Refuses to resume when anything that identifies the results changed,
    /// naming the first difference.
    pub(crate) fn check_fingerprint(&self, now: &Value) -> Result<(), Error> {
        let manifest_path = self.path.join(MANIFEST);
        let refuse = |why: String| Error::config(format!("--resume refused: {why}"));
        let text = fs::read_to_string(&manifest_path).map_err(|e| {
            refuse(format!(
                "{}: cannot read the interrupted run's manifest: {e}; use --overwrite to start again",
                manifest_path.display()
            ))
        })?;
        let then: Value = serde_json::from_str(&text)
            .ok()
            .and_then(|v: Value| v.get("fingerprint").cloned())
            .ok_or_else(|| {
                refuse(format!(
                    "{}: damaged manifest; use --overwrite to start again",
                    manifest_path.display()
                ))
            })?;
        let then = record::upgrade(&then).map_err(|why| {
            let by = match why {
                Unreadable::Older => "an older refscore, in a form this version cannot read".into(),
                Unreadable::Newer(n) => format!("a newer refscore (run record format {n})"),
            };
            refuse(format!(
                "{}: the interrupted run was recorded by {by}; finish it with that version, or use --overwrite to start again",
                manifest_path.display()
            ))
        })?;
        if let Some(why) = difference(&then, now) {
            return Err(refuse(format!(
                "{why} since the interrupted run; use --overwrite to start again"
            )));
        }
        Ok(())
    }

    /// The committed parts that can be kept, sorted by first row. Parts with
    /// rows worth retrying, damaged parts and temporaries are removed, so
    /// their rows are scored again (paid judge answers come from the journal).
    pub(crate) fn load_parts(&self) -> Result<Vec<(PathBuf, PartInfo)>, Error> {
        let mut parts = Vec::new();
        if let Ok(entries) = fs::read_dir(&self.path) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with(".part-") {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        for path in part_paths(&self.path) {
            match read_part(&path) {
                Ok(info) if info.retryable_rows == 0 => parts.push((path, info)),
                // Damaged, or rows worth retrying: scored again.
                Ok(_)
                | Err(Error {
                    class: refscore_core::ErrorClass::BadInput,
                    ..
                }) => fs::remove_file(&path)
                    .map_err(|e| Error::io(format!("{}: {e}", path.display())))?,
                // Cannot read it now (permissions, too many files): stop,
                // rather than throw committed work away.
                Err(e) => return Err(e),
            }
        }
        parts.sort_by_key(|(_, p)| p.first_row);
        let mut kept: Vec<(PathBuf, PartInfo)> = Vec::new();
        for (path, p) in parts {
            let overlaps = kept
                .last()
                .is_some_and(|(_, q)| q.first_row + q.rows > p.first_row);
            if overlaps {
                fs::remove_file(&path)
                    .map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
            } else {
                kept.push((path, p));
            }
        }
        Ok(kept)
    }
}

fn part_paths(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .map(|n| n.to_string_lossy())
                        .is_some_and(|n| n.starts_with("part-") && n.ends_with(".parquet"))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// How the defined judge metrics of two fingerprints differ, naming the
/// first metric added, dropped or changed and what changed.
fn defined_difference(then: Option<&Value>, now: Option<&Value>) -> String {
    let empty = Map::new();
    let of = |v: Option<&Value>| v.and_then(Value::as_object).unwrap_or(&empty).clone();
    let (a, b) = (of(then), of(now));
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    for name in names {
        match (a.get(name), b.get(name)) {
            (Some(_), None) => {
                return format!("judge metric '{name}' was in the run and is not now")
            }
            (None, Some(_)) => return format!("judge metric '{name}' is new"),
            (Some(x), Some(y)) if x != y => {
                let what = [
                    "version",
                    "threshold",
                    "band",
                    "answer",
                    "scale",
                    "max_tokens",
                ]
                .into_iter()
                .find(|k| x[k] != y[k])
                .unwrap_or("definition");
                let what = if what == "version" { "prompt" } else { what };
                let key = if what == "prompt" { "version" } else { what };
                return format!(
                    "judge metric '{name}': its {what} changed ({} then, {} now)",
                    show(&x[key]),
                    show(&y[key])
                );
            }
            _ => {}
        }
    }
    "the judge metrics differ".into()
}

/// A fingerprint value in a message: text without quotes.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "unset".into(),
        other => other.to_string(),
    }
}

/// The first difference between two fingerprints, in words.
fn difference(then: &Value, now: &Value) -> Option<String> {
    let inputs = |v: &Value| v["inputs"].as_array().cloned().unwrap_or_default();
    let (a, b) = (inputs(then), inputs(now));
    for (x, y) in a.iter().zip(&b) {
        if x["path"] != y["path"] {
            return Some(format!(
                "the input files differ ({} then, {} now)",
                x["path"], y["path"]
            ));
        }
        if x != y {
            return Some(format!("the input file {} changed", y["path"]));
        }
    }
    if a.len() != b.len() {
        return Some(format!(
            "the input has {} files now, {} then",
            b.len(),
            a.len()
        ));
    }
    if then["shard"] != now["shard"] {
        return Some(format!(
            "--shard differs ({} then, {} now)",
            then["shard"], now["shard"]
        ));
    }
    // A defined judge metric's threshold is in the thresholds too: name the
    // metric rather than the thresholds.
    let defined = |v: &Value| v["settings"].get("judge_metrics").cloned();
    if defined(then) != defined(now) {
        return Some(defined_difference(
            defined(then).as_ref(),
            defined(now).as_ref(),
        ));
    }
    if then["metrics"] != now["metrics"] {
        let names = |v: &Value| {
            let names: Vec<String> = (v["metrics"].as_array().into_iter().flatten())
                .map(show)
                .collect();
            names.join(",")
        };
        return Some(format!(
            "--metrics differs ({} then, {} now)",
            names(then),
            names(now)
        ));
    }
    if then["thresholds"] != now["thresholds"] {
        return Some("the --threshold settings differ".into());
    }
    let empty = Map::new();
    let (s, t) = (
        then["settings"].as_object().unwrap_or(&empty),
        now["settings"].as_object().unwrap_or(&empty),
    );
    let mut keys: Vec<&String> = s.keys().chain(t.keys()).collect();
    keys.sort();
    keys.dedup();
    for k in keys {
        let (x, y) = (s.get(k), t.get(k));
        if x != y {
            let show = |v: Option<&Value>| v.map_or("unset".to_string(), |v| v.to_string());
            return Some(match k.as_str() {
                "model_files" => "the embedding model files changed".to_string(),
                "judge_templates" => "the judge prompt versions changed".to_string(),
                _ => format!(
                    "the setting '{k}' differs ({} then, {} now)",
                    show(x),
                    show(y)
                ),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, RecordBatch, StringArray};
    use refscore_core::metric::BUILTIN;

    use super::*;

    fn dataset(dir: &Path) -> Dataset {
        let path = dir.join("in.parquet");
        let text = Arc::new(StringArray::from(vec!["Paris"])) as ArrayRef;
        let batch =
            RecordBatch::try_from_iter([("reference", text.clone()), ("output", text)]).unwrap();
        let file = File::create(&path).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        Dataset::open(path.to_str().unwrap(), &Default::default()).unwrap()
    }

    /// A run of `metrics` as the CLI describes it: every built-in's default
    /// threshold (what the registry holds), `extra` over them.
    fn spec(dir: &Path, metrics: &[&str], extra: &[(&str, f64)]) -> JobSpec {
        let mut thresholds: std::collections::BTreeMap<String, f64> = (BUILTIN.iter())
            .map(|m| (m.name.clone(), m.default_threshold))
            .collect();
        thresholds.extend(extra.iter().map(|(n, t)| (n.to_string(), *t)));
        let thresholds = thresholds.into_iter().collect();
        JobSpec {
            output: dir.join("out.parquet"),
            overwrite: false,
            resume: true,
            shard: None,
            metrics: metrics.iter().map(|m| m.to_string()).collect(),
            settings: [("batch_size".to_string(), json!(64))].into(),
            thresholds,
            footer: Vec::new(),
            commit_intervals: crate::commit_intervals(None),
        }
    }

    #[test]
    fn a_builtin_metric_added_to_refscore_keeps_the_record_of_a_run_without_it() {
        let dir = tempfile::tempdir().unwrap();
        let d = dataset(dir.path());
        let chosen = ["exact_match", "token_f1"];
        let today = fingerprint(&d, &spec(dir.path(), &chosen, &[]));
        // The next refscore has one more built-in metric, whose default
        // threshold the CLI passes with the others'.
        let new = ("rouge_l", 0.5);
        let later = fingerprint(&d, &spec(dir.path(), &chosen, &[new]));
        assert_eq!(today, later);
        assert_eq!(hash(&today), hash(&later));
        assert_eq!(today["format"], json!(record::FORMAT));
        assert_eq!(today["metrics"], json!(chosen));
        // A threshold of a metric the run does not compute changes nothing
        // either; one of a chosen metric, and choosing the new metric, do.
        let unused = fingerprint(&d, &spec(dir.path(), &chosen, &[("cosine", 0.9)]));
        assert_eq!(hash(&today), hash(&unused));
        let used = fingerprint(&d, &spec(dir.path(), &chosen, &[("token_f1", 0.9)]));
        assert_ne!(hash(&today), hash(&used));
        let with_new = ["exact_match", "token_f1", "rouge_l"];
        let chooses = fingerprint(&d, &spec(dir.path(), &with_new, &[new]));
        assert_ne!(hash(&today), hash(&chooses));
        assert_eq!(
            difference(&today, &chooses).unwrap(),
            "--metrics differs (exact_match,token_f1 then, exact_match,token_f1,rouge_l now)"
        );
    }
}
