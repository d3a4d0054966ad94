//! The `--config` file as more arguments, as ripgrep reads its config: each
//! key is a `score` flag's long name with `_` for `-` (`input` is the input,
//! `thresholds` a table of `--threshold`s), each value that flag's value.
//! The words go through the same parser and the same checks as the command
//! line, so the file accepts exactly what the flags accept. The one table
//! that is not a flag, `[judge.metric.NAME]`, defines judge metrics; the
//! judge crate reads those from the same file.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};
use refscore_batch::Error;
use toml::{Spanned, Value};

/// Keys whose relative paths are taken from the config file's folder.
const RELATIVE_PATHS: [&str; 4] = ["input", "output", "judge_cache", "judge_metrics"];

/// The `score` words a config file stands for.
#[derive(Debug, Clone)]
pub(crate) struct ConfigWords {
    /// The file, for messages.
    pub path: PathBuf,
    /// The words, flags and values, to go before the command line's.
    pub words: Vec<OsString>,
    /// Per argument id, how many values the file gave.
    pub given: BTreeMap<String, usize>,
    /// Whether the file has a `[judge]` table (judge metric definitions).
    pub defines_judge_metrics: bool,
}

/// Reads `path` into words of `score` (described by `cmd`), leaving out
/// each key whose flag the command line sets (`on_command_line(id)`): the
/// command line wins. `threshold` is the exception: the file's thresholds
/// come first and the command line's add to them.
pub(crate) fn read(
    path: &Path,
    cmd: &Command,
    on_command_line: &dyn Fn(&str) -> bool,
) -> Result<ConfigWords, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("{}: cannot read config file: {e}", path.display())))?;
    let table: BTreeMap<Spanned<String>, Value> = toml::from_str(&text).map_err(|e| {
        let line = e.span().map(|s| line_of(&text, s.start));
        at(path, line, e.message())
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut out = ConfigWords {
        path: path.to_path_buf(),
        words: Vec::new(),
        given: BTreeMap::new(),
        defines_judge_metrics: false,
    };
    for (key, value) in table {
        let line = Some(line_of(&text, key.span().start));
        let key = key.into_inner();
        if key == "judge" {
            if !value.is_table() {
                return Err(at(
                    path,
                    line,
                    "`judge` is a table: [judge.metric.NAME] defines a judge metric",
                ));
            }
            out.defines_judge_metrics = true;
            continue;
        }
        let id = if key == "thresholds" {
            "threshold"
        } else {
            key.as_str()
        };
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id().as_str() == id && id != "config")
            .ok_or_else(|| at(path, line, &format!("unknown key `{key}`; keys are the flags of `refscore score --help` with _ for -")))?;
        if on_command_line(id) && id != "threshold" {
            continue;
        }
        let values = values_of(&key, arg, value).map_err(|e| at(path, line, &e))?;
        let values: Vec<String> = if RELATIVE_PATHS.contains(&id) {
            values.into_iter().map(|v| relative(&base, v)).collect()
        } else {
            values
        };
        *out.given.entry(id.to_string()).or_default() += values.len();
        for v in values {
            match (arg.is_positional(), arg.get_action(), arg.get_long()) {
                (true, _, _) => out.words.push(v.into()),
                (false, ArgAction::SetTrue, Some(long)) => {
                    out.words.push(format!("--{long}").into())
                }
                (false, _, Some(long)) => out.words.push(format!("--{long}={v}").into()),
                (false, _, None) => {
                    return Err(Error::internal(format!("flag {id} has no long name")))
                }
            }
        }
    }
    Ok(out)
}

/// The flag values a key's TOML value stands for: a switch's `true` is one
/// (its presence), `false` none; a string, number or list item one each; a
/// `thresholds` table one `METRIC=VALUE` per entry.
fn values_of(key: &str, arg: &Arg, value: Value) -> Result<Vec<String>, String> {
    let scalar = |v: &Value| -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Integer(i) => Ok(i.to_string()),
            Value::Float(f) => Ok(f.to_string()),
            Value::Boolean(b) => Ok(b.to_string()),
            other => Err(format!(
                "`{key}`: expected a string or number, not {}",
                other.type_str()
            )),
        }
    };
    let many = matches!(arg.get_action(), ArgAction::Append);
    match (arg.get_action(), value) {
        (ArgAction::SetTrue, Value::Boolean(b)) => Ok(if b { vec![String::new()] } else { vec![] }),
        (ArgAction::SetTrue, other) => Err(format!(
            "`{key}`: expected true or false, not {}",
            other.type_str()
        )),
        (_, Value::Table(t)) if arg.get_id() == "threshold" => t
            .iter()
            .map(|(metric, v)| scalar(v).map(|v| format!("{metric}={v}")))
            .collect(),
        (_, Value::Array(items)) if many => items.iter().map(scalar).collect(),
        (_, v) => scalar(&v).map(|s| vec![s]),
    }
}

/// `p` taken from the config file's folder unless absolute.
fn relative(base: &Path, p: String) -> String {
    if Path::new(&p).is_absolute() || base.as_os_str().is_empty() {
        p
    } else {
        base.join(p).to_string_lossy().into_owned()
    }
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// A configuration error at a line of the file.
fn at(path: &Path, line: Option<usize>, msg: &str) -> Error {
    match line {
        Some(l) => Error::config(format!("{}:{l}: {msg}", path.display())),
        None => Error::config(format!("{}: {msg}", path.display())),
    }
}

/// The files a config file's `judge_metrics` key names (relative to the
/// file's folder), for `refscore judge-metrics --config`.
pub(crate) fn judge_metrics_files(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("{}: cannot read config file: {e}", path.display())))?;
    let table: toml::Table = toml::from_str(&text)
        .map_err(|e| at(path, e.span().map(|s| line_of(&text, s.start)), e.message()))?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let names: Vec<String> = match table.get("judge_metrics") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                other => Err(at(
                    path,
                    None,
                    &format!(
                        "`judge_metrics`: expected a string, not {}",
                        other.type_str()
                    ),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(at(
                path,
                None,
                &format!(
                    "`judge_metrics`: expected a string or a list, not {}",
                    other.type_str()
                ),
            ))
        }
    };
    Ok(names
        .into_iter()
        .map(|n| PathBuf::from(relative(&base, n)))
        .collect())
}
