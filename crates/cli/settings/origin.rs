//! Where each setting's value came from, so a bad one is reported as the
//! flag's (usage, 64) or the config file's line (configuration, 78).

use refscore_core::{Error, Given};

use crate::config::ConfigWords;

/// Where each setting's value came from: the `--config` file (whose
/// words come before the command line's) or the command line. A bad value
/// is a usage error (64) on the command line and a configuration error (78)
/// in the file, and the message names whichever was given.
#[derive(Debug, Clone)]
pub(super) struct Origin {
    pub(super) file: Option<ConfigWords>,
}

impl Origin {
    /// Whether the value of argument `id` came from the file.
    pub(super) fn in_file(&self, id: &str) -> bool {
        Given::in_file(self, id)
    }

    /// How many of argument `id`'s values came from the file (they come
    /// first).
    pub(super) fn file_values(&self, id: &str) -> usize {
        Given::file_values(self, id)
    }

    /// A configuration error about the `index`-th value of `id` in the
    /// file, naming the file and the value's line.
    pub(super) fn in_file_error(&self, id: &str, index: usize, msg: &str) -> Error {
        Given::in_file_error(self, id, index, msg)
    }

    /// The error for a bad value of `id`: the flag's or the file's.
    pub(super) fn bad(&self, id: &str, shown: &str, why: &str) -> Error {
        Given::bad(self, id, shown, why)
    }

    /// Checks a value against `ok` (see [`Origin::bad`]).
    pub(super) fn ranged<T: Copy + std::fmt::Display>(
        &self,
        value: Option<T>,
        id: &str,
        ok: impl Fn(T) -> bool,
        expected: &str,
    ) -> Result<Option<T>, Error> {
        Given::ranged(self, value, id, ok, expected)
    }

    /// Parses a text value (see [`Origin::bad`]; `parse`'s message starts
    /// with the value).
    pub(super) fn parsed<T>(
        &self,
        value: Option<String>,
        id: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Error> {
        Given::parsed(self, value, id, parse)
    }
}

/// The checks themselves are the trait's, shared with the options the
/// feature crates check (the judge's).
impl Given for Origin {
    fn in_file(&self, id: &str) -> bool {
        self.file.as_ref().is_some_and(|f| f.lines.contains_key(id))
    }

    fn in_file_error(&self, id: &str, index: usize, msg: &str) -> Error {
        match &self.file {
            Some(f) => f.file.error_at(f.line_of(id, index), msg),
            None => Error::config(format!("config file: {msg}")),
        }
    }

    fn file_values(&self, id: &str) -> usize {
        self.file
            .as_ref()
            .and_then(|f| f.lines.get(id).map(Vec::len))
            .unwrap_or(0)
    }
}
