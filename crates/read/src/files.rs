//! Finding the input files and reading their footers.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use parquet::arrow::arrow_reader::ArrowReaderMetadata;
use refscore_core::Error;
use sha2::{Digest, Sha256};

use crate::source::Footer;

/// Expands a file, a directory (every `*.parquet` below it, recursively, in
/// path order, skipping hidden `.`/`_` entries) or a glob into file paths.
pub(crate) fn discover(spec: &str) -> Result<Vec<PathBuf>, Error> {
    let path = Path::new(spec);
    if spec.contains(['*', '?', '[']) && !path.exists() {
        let pattern = glob::glob(spec)
            .map_err(|e| Error::config(format!("{spec}: bad glob pattern: {e}")))?;
        let mut out = Vec::new();
        let mut checked = std::collections::HashSet::new();
        for entry in pattern {
            let p = entry.map_err(|e| Error::io(format!("{spec}: {e}")))?;
            if p.is_file() {
                refuse_table_files(spec, &p, &mut checked)?;
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
    // A partition folder of a table is part of the table (`.` inside one
    // too: its folders above are looked at as absolute paths).
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    refuse_table_folders(spec, absolute.ancestors(), &mut Default::default())?;
    let mut out = Vec::new();
    let mut seen = Seen::default();
    walk(spec, path, &mut out, &mut seen)?;
    out.sort();
    if out.is_empty() {
        return Err(Error::io(format!(
            "{spec}: directory holds no .parquet files"
        )));
    }
    Ok(out)
}

/// Real (symlink-resolved) folders and files already visited: a folder
/// reached twice through links (`latest -> 2024-06-01`, a link to `.`) is
/// read once, and a loop of links ends.
#[derive(Default)]
struct Seen {
    dirs: std::collections::HashSet<PathBuf>,
    files: std::collections::HashSet<PathBuf>,
}

/// The refusal of a table's folder, `dir`, or of files inside it, read
/// loose: they give a wrong row count without a word.
fn table_refusal(spec: &str, dir: &Path, source: &dyn crate::source::Source) -> Error {
    let which = if Path::new(spec) == dir {
        String::new()
    } else {
        format!("{} ", dir.display())
    };
    source.refuse_loose(spec, &which, &dir.display().to_string())
}

/// Refuses a glob match that lies inside a table's folder, checking each
/// folder above it once.
fn refuse_table_files(
    spec: &str,
    file: &Path,
    checked: &mut std::collections::HashSet<PathBuf>,
) -> Result<(), Error> {
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    refuse_table_folders(spec, absolute.ancestors().skip(1), checked)
}

/// Refuses when any of `dirs` (a path's folders, nearest first) is a
/// table's folder; folders already checked end the walk up.
fn refuse_table_folders<'p>(
    spec: &str,
    dirs: impl Iterator<Item = &'p Path>,
    checked: &mut std::collections::HashSet<PathBuf>,
) -> Result<(), Error> {
    for dir in dirs {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if !checked.insert(dir.to_path_buf()) {
            break;
        }
        if let Some(source) = crate::source::table_in(dir) {
            return Err(table_refusal(spec, dir, source));
        }
    }
    Ok(())
}

fn walk(spec: &str, dir: &Path, out: &mut Vec<PathBuf>, seen: &mut Seen) -> Result<(), Error> {
    if let Some(source) = crate::source::table_in(dir) {
        return Err(table_refusal(spec, dir, source));
    }
    let real = std::fs::canonicalize(dir).map_err(|e| {
        Error::io(format!(
            "{}: cannot resolve: {}",
            dir.display(),
            io_reason(&e)
        ))
    })?;
    if !seen.dirs.insert(real) {
        return Ok(());
    }
    let mut entries: Vec<std::fs::DirEntry> = Vec::new();
    let listing = std::fs::read_dir(dir).map_err(|e| {
        Error::io(format!(
            "{}: cannot list directory: {}",
            dir.display(),
            io_reason(&e)
        ))
    })?;
    for entry in listing {
        entries
            .push(entry.map_err(|e| Error::io(format!("{}: {}", dir.display(), io_reason(&e))))?);
    }
    // Visit in name order, so that of two paths to one file the first in
    // sorted order is the one kept.
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.starts_with('_') {
            continue;
        }
        let p = entry.path();
        if p.is_dir() {
            walk(spec, &p, out, seen)?;
        } else if name.ends_with(".parquet") || name.ends_with(".parq") {
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            if seen.files.insert(real) {
                out.push(p);
            }
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
pub(crate) fn read_footer(path: &Path) -> Result<Footer, Error> {
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
    // The footer: 4-byte length and magic at the end, the footer before them.
    let mut footer_len = [0u8; 4];
    file.seek(SeekFrom::End(-8))
        .and_then(|_| file.read_exact(&mut footer_len))
        .map_err(|e| Error::io(format!("{shown}: {e}")))?;
    let footer_len = u32::from_le_bytes(footer_len) as u64;
    let mut footer = vec![0u8; footer_len.min(len.saturating_sub(8)) as usize];
    file.seek(SeekFrom::End(-8 - footer.len() as i64))
        .and_then(|_| file.read_exact(&mut footer))
        .map_err(|e| Error::io(format!("{shown}: {e}")))?;
    Ok(Footer {
        meta,
        sha256: format!("{:x}", Sha256::digest(&footer)),
        size: len,
        identity: file
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos().to_string()),
    })
}
