//! Finding the input files and reading their footers.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use refscore_batch::Error;

use crate::InputFile;

/// Expands a file, a directory (every `*.parquet` below it, recursively, in
/// path order, skipping hidden `.`/`_` entries) or a glob into file paths.
pub(crate) fn discover(spec: &str) -> Result<Vec<PathBuf>, Error> {
    let path = Path::new(spec);
    if spec.contains(['*', '?', '[']) && !path.exists() {
        let pattern = glob::glob(spec)
            .map_err(|e| Error::config(format!("{spec}: bad glob pattern: {e}")))?;
        let mut out = Vec::new();
        for entry in pattern {
            let p = entry.map_err(|e| Error::io(format!("{spec}: {e}")))?;
            if p.is_file() {
                out.push(p);
            }
        }
        out.sort();
        if out.is_empty() {
            return Err(Error::io(format!("{spec}: no files match this pattern")));
        }
        return Ok(out);
    }
    let meta = std::fs::metadata(path)
        .map_err(|e| Error::io(format!("{spec}: cannot read: {}", io_reason(&e))))?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    walk(path, &mut out)?;
    out.sort();
    if out.is_empty() {
        return Err(Error::io(format!(
            "{spec}: directory holds no .parquet files"
        )));
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        Error::io(format!(
            "{}: cannot list directory: {}",
            dir.display(),
            io_reason(&e)
        ))
    })?;
    for entry in entries {
        let entry =
            entry.map_err(|e| Error::io(format!("{}: {}", dir.display(), io_reason(&e))))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let p = entry.path();
        if p.is_dir() {
            walk(&p, out)?;
        } else if name.ends_with(".parquet") || name.ends_with(".parq") {
            out.push(p);
        }
    }
    Ok(())
}

/// A short reason for an I/O error, without Rust's "(os error N)" suffix.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// Opens a file and reads its footer, telling "not Parquet" apart from
/// "truncated" by the magic bytes at both ends.
pub(crate) fn read_footer(path: &Path) -> Result<InputFile, Error> {
    let shown = path.display();
    let mut file = File::open(path)
        .map_err(|e| Error::io(format!("{shown}: cannot open: {}", io_reason(&e))))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io(format!("{shown}: {}", io_reason(&e))))?
        .len();
    let mut head = [0u8; 4];
    let mut tail = [0u8; 4];
    let head_ok = len >= 4 && file.read_exact(&mut head).is_ok() && &head == b"PAR1";
    if !head_ok {
        return Err(Error::bad_input(format!(
            "{shown}: not a Parquet file (no PAR1 magic at the start)"
        )));
    }
    let tail_ok = len >= 12
        && file.seek(SeekFrom::End(-4)).is_ok()
        && file.read_exact(&mut tail).is_ok()
        && &tail == b"PAR1";
    if !tail_ok {
        return Err(Error::bad_input(format!(
            "{shown}: truncated or corrupt Parquet file (no footer; {len} bytes)"
        )));
    }
    file.seek(SeekFrom::Start(0))
        .map_err(|e| Error::io(format!("{shown}: {e}")))?;
    let meta = ArrowReaderMetadata::load(&file, Default::default())
        .map_err(|e| Error::bad_input(format!("{shown}: corrupt Parquet footer: {e}")))?;
    let rows = meta.metadata().file_metadata().num_rows().max(0) as u64;
    Ok(InputFile {
        path: path.to_path_buf(),
        rows,
        schema: Arc::clone(meta.schema()),
    })
}
