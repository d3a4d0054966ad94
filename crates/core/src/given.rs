//! Where an option's value was given: on the command line (a bad value is
//! a usage error, exit 64, naming the flag) or in the `--config` file (a
//! configuration error, exit 78, naming the file's line). The CLI knows
//! which; a feature's own options check their values through this trait,
//! so each value's origin is decided once, with the value, wherever the
//! check lives.

use crate::Error;

/// Where each option's value came from.
pub trait Given {
    /// Whether the value of option `id` (a flag's long name with `_` for
    /// `-`) came from the config file.
    fn in_file(&self, id: &str) -> bool;

    /// A configuration error about the `index`-th value of `id` in the
    /// config file, naming the file and the value's line.
    fn in_file_error(&self, id: &str, index: usize, msg: &str) -> Error;

    /// How many of option `id`'s values came from the config file (a
    /// repeated flag's: the file's come first, then the command line's).
    fn file_values(&self, id: &str) -> usize;

    /// The error for a bad value of `id`, shown as `shown`: the flag's
    /// (`--judge-x shown: why`, 64) or the file's (`judge_x = shown: why`
    /// at its line, 78).
    fn bad(&self, id: &str, shown: &str, why: &str) -> Error {
        if self.in_file(id) {
            self.in_file_error(id, 0, &format!("{id} = {shown}: {why}"))
        } else {
            Error::usage(format!("--{} {shown}: {why}", id.replace('_', "-")))
        }
    }

    /// Checks a value against `ok` (see [`Given::bad`]).
    fn ranged<T: Copy + std::fmt::Display>(
        &self,
        value: Option<T>,
        id: &str,
        ok: impl Fn(T) -> bool,
        expected: &str,
    ) -> Result<Option<T>, Error>
    where
        Self: Sized,
    {
        match value {
            Some(v) if !ok(v) => Err(self.bad(id, &v.to_string(), &format!("expected {expected}"))),
            v => Ok(v),
        }
    }

    /// Parses a text value (see [`Given::bad`]; `parse`'s message starts
    /// with the value).
    fn parsed<T>(
        &self,
        value: Option<String>,
        id: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Error>
    where
        Self: Sized,
    {
        let Some(v) = value else { return Ok(None) };
        parse(&v).map(Some).map_err(|e| {
            if self.in_file(id) {
                self.in_file_error(id, 0, &format!("{id} = {e}"))
            } else {
                Error::usage(format!("--{} {e}", id.replace('_', "-")))
            }
        })
    }
}

/// Every value given on the command line: nothing read from a file.
pub struct CommandLine;

impl Given for CommandLine {
    fn in_file(&self, _id: &str) -> bool {
        false
    }

    fn in_file_error(&self, _id: &str, _index: usize, msg: &str) -> Error {
        Error::config(format!("config file: {msg}"))
    }

    fn file_values(&self, _id: &str) -> usize {
        0
    }
}

/// So that a `&dyn Given` offers the generic checks too.
impl<G: Given + ?Sized> Given for &G {
    fn in_file(&self, id: &str) -> bool {
        (**self).in_file(id)
    }

    fn in_file_error(&self, id: &str, index: usize, msg: &str) -> Error {
        (**self).in_file_error(id, index, msg)
    }

    fn file_values(&self, id: &str) -> usize {
        (**self).file_values(id)
    }
}
