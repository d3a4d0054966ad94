//! Files read and written as a user and a crash expect: the user's text
//! files read with a clear error, and files written whole or not at all.
//! Every stage that leaves something on disk besides the results (the summary, the judge cache, the embedding
//! cache) writes it under a temporary name beside the target and renames it
//! into place, so a killed run or two runs at once never leave a half file
//! where a reader would take it for a whole one.

use std::io::{self, Write};
use std::path::Path;

use crate::Error;

/// Reads a text file the user wrote (a config file, judge metric
/// definitions): a file that is not UTF-8 text is a configuration error
/// (78) naming it, one that cannot be read an I/O error (74). `what` says
/// what the file is, for the message.
pub fn read_text(path: &Path, what: &str) -> Result<String, Error> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::io(format!("{}: cannot read {what}: {e}", path.display())))?;
    String::from_utf8(bytes).map_err(|e| {
        Error::config(format!(
            "{}: {what} is not UTF-8 text (invalid byte at offset {})",
            path.display(),
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Writes `bytes` to `path` through an exclusively created, randomly named
/// temporary file in the same folder (a symlink planted there cannot
/// redirect the write), flushed to disk before the rename and the folder
/// flushed after it, so a power loss leaves the old file or the whole new
/// one, never an empty one. On failure the temporary file is removed. For
/// files a run depends on: the summary, a run's manifest.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(path, bytes, true)
}

/// Like [`write_atomically`] (exclusive temporary, rename, never a half
/// file under the final name) but without flushing to disk: for cache
/// entries, thousands per run, where a write lost to a power cut is only a
/// miss, so flushing each one would be wasted work.
pub fn write_cache_entry(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_whole(path, bytes, false)
}

/// Like [`write_atomically`], from a reader (a download, a copy of a large
/// file) streamed to the temporary file, never held in memory whole.
pub fn copy_atomically(from: &mut impl io::Read, path: &Path) -> io::Result<()> {
    write_whole_with(path, true, |f| io::copy(from, f).map(|_| ()))
}

/// Like [`copy_atomically`], but never replaces a file already at `path`:
/// the whole, flushed temporary file is given the name with a hard link,
/// which the file system makes only where no file has it (two writers
/// racing for one name never overwrite each other). `Ok(false)` when the
/// name was taken. For request files in a folder other runs may share.
/// Where the file system has no hard links, the name is claimed by an
/// exclusive create and written in place.
pub fn copy_exclusively(from: &mut impl io::Read, path: &Path) -> io::Result<bool> {
    let dir = parent_of(path);
    let mut temp = temporary_beside(path)?;
    io::copy(from, temp.as_file_mut())?;
    temp.as_file().sync_all()?;
    match std::fs::hard_link(temp.path(), path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
        Err(_) => {
            let mut claimed = match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(false),
                Err(e) => return Err(e),
            };
            let mut copy = std::fs::File::open(temp.path())?;
            io::copy(&mut copy, &mut claimed)?;
            claimed.sync_all()?;
        }
    }
    drop(temp);
    std::fs::File::open(dir)?.sync_all()?;
    Ok(true)
}

/// The folder a file goes in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// An exclusively created, randomly named temporary file beside `path`
/// (`.NAME.XXXX.partial`), removed when dropped unless given its name.
fn temporary_beside(path: &Path) -> io::Result<tempfile::NamedTempFile> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".partial")
        .tempfile_in(parent_of(path))
}

fn write_whole(path: &Path, bytes: &[u8], durable: bool) -> io::Result<()> {
    write_whole_with(path, durable, |f| f.write_all(bytes))
}

fn write_whole_with(
    path: &Path,
    durable: bool,
    fill: impl FnOnce(&mut std::fs::File) -> io::Result<()>,
) -> io::Result<()> {
    let dir = parent_of(path);
    let mut temp = temporary_beside(path)?;
    fill(temp.as_file_mut())?;
    if durable {
        temp.as_file().sync_all()?;
    }
    temp.persist(path).map_err(|e| e.error)?;
    if durable {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_whole_files_and_leaves_no_temporary_behind() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        write_atomically(&path, b"first").unwrap();
        write_atomically(&path, b"second").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "only the target remains");
        let missing = dir.path().join("no-such-dir").join("x");
        assert!(write_atomically(&missing, b"x").is_err());
        // From a reader that fails half way: the old file stays whole.
        let mut cut = std::io::Read::chain(&b"third"[..], FailingReader);
        assert!(copy_atomically(&mut cut, &path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"second");
        copy_atomically(&mut &b"third"[..], &path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"third");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "only the target remains");
    }

    #[test]
    fn an_exclusive_copy_never_replaces_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests-001.jsonl");
        assert!(copy_exclusively(&mut &b"first"[..], &path).unwrap());
        assert!(!copy_exclusively(&mut &b"second"[..], &path).unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"first");
        assert_eq!(listing_len(dir.path()), 1, "no temporary is left");
        // Racing writers: each name goes to exactly one of them.
        let winners: Vec<bool> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|k| {
                    let p = dir.path().join("requests-002.jsonl");
                    s.spawn(move || {
                        let text = format!("writer {k}");
                        copy_exclusively(&mut text.as_bytes(), &p).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(winners.iter().filter(|w| **w).count(), 1);
        assert_eq!(listing_len(dir.path()), 2);
    }

    fn listing_len(dir: &Path) -> usize {
        std::fs::read_dir(dir).unwrap().count()
    }

    /// A reader whose transfer breaks (a download cut short).
    struct FailingReader;

    impl std::io::Read for FailingReader {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("connection reset"))
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_symlink_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let target = dir.path().join("out.json");
        // The old predictable temporary name, planted as a link.
        let planted = dir
            .path()
            .join(format!(".out.json.{}.partial", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        write_atomically(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // Cache entries take the same exclusive-temporary path.
        write_cache_entry(&target, b"entry").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&target).unwrap(), b"entry");
    }
}
