//! Files written whole or not at all. Every stage that leaves something on
//! disk besides the results (the summary, the judge cache, the embedding
//! cache) writes it under a temporary name beside the target and renames it
//! into place, so a killed run or two runs at once never leave a half file
//! where a reader would take it for a whole one.

use std::io;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same folder and
/// a rename; on failure the temporary file is removed.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(".{name}.{}.partial", std::process::id()));
    let result = std::fs::write(&temp, bytes).and_then(|()| std::fs::rename(&temp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
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
    }
}
