//! The `--config` file as more arguments, as ripgrep reads its config: each
//! key is a `score` flag's long name with `_` for `-` (`input` is the input,
//! `thresholds` a table of `--threshold`s), each value that flag's value;
//! a key of the `[judge]` table is a `judge_*` flag without its prefix
//! (`[judge] service_tier = "flex"` is `judge_service_tier`).
//! The words go through the same parser and the same checks as the command
//! line, so the file accepts exactly what the flags accept. The tables
//! that are not flags: `[judge.metric.NAME]` defines judge metrics (the
//! judge crate reads those from the same parse of the file), and
//! `[judge.panel]` names a panel of judges (it stands for the panel's flags).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};
use refscore_core::Error;
use refscore_judge::tiers::{flag, TierKind, KINDS};
use refscore_judge::JudgeMetrics;
use serde::Deserialize;
use toml::{Spanned, Value};

/// Keys whose relative paths are taken from the config file's folder.
const RELATIVE_PATHS: [&str; 4] = ["input", "output", "judge_cache", "judge_metrics"];

/// A config file, read and parsed once (a file given as `/dev/stdin` can
/// be read only once): its flags and its judge metric definitions both come
/// from this one parse.
#[derive(Debug, Clone)]
pub(crate) struct ConfigFile {
    /// The file, for messages.
    pub path: PathBuf,
    /// Its text, for the lines of messages.
    pub text: String,
    /// Its keys and their values.
    table: BTreeMap<Spanned<String>, Value>,
    /// The judge metrics a run with this file knows: the built-in ones
    /// and the file's `[judge.metric.NAME]` definitions.
    pub judge_metrics: JudgeMetrics,
}

impl ConfigFile {
    /// Reads a config file; text that is not UTF-8 is a configuration
    /// error (78) naming the file, other read failures are I/O (74), TOML
    /// that does not parse or a bad definition a configuration error at
    /// its line.
    pub(crate) fn read(path: &Path) -> Result<ConfigFile, Error> {
        let text = refscore_core::files::read_text(path, "config file")?;
        let syntax = |e: toml::de::Error| {
            let line = e.span().map(|s| line_of(&text, s.start));
            at(path, line, e.message())
        };
        let parsed = toml::de::DeTable::parse(&text).map_err(syntax)?;
        let table: BTreeMap<Spanned<String>, Value> =
            Deserialize::deserialize(toml::de::Deserializer::from(parsed.clone()))
                .map_err(syntax)?;
        let mut judge_metrics = JudgeMetrics::builtin();
        // A `judge` key that is no table is refused with the other keys.
        if table
            .iter()
            .any(|(k, v)| k.get_ref() == "judge" && v.is_table())
        {
            judge_metrics.read_config_table(path, &text, parsed)?;
        }
        Ok(ConfigFile {
            path: path.to_path_buf(),
            text,
            table,
            judge_metrics,
        })
    }

    /// A configuration error at a line of this file.
    pub(crate) fn error_at(&self, line: Option<usize>, msg: &str) -> Error {
        at(&self.path, line, msg)
    }
}

/// The `score` words a config file stands for.
#[derive(Debug, Clone)]
pub(crate) struct ConfigWords {
    /// The file.
    pub file: ConfigFile,
    /// The words, flags and values, to go before the command line's.
    pub words: Vec<OsString>,
    /// Per argument id, the line of each value the file gave (a key's line;
    /// for `[thresholds]`, each entry's).
    pub lines: BTreeMap<String, Vec<usize>>,
}

impl ConfigWords {
    /// The line of argument `id`'s `index`-th value from the file.
    pub(crate) fn line_of(&self, id: &str, index: usize) -> Option<usize> {
        let lines = self.lines.get(id)?;
        lines.get(index).or(lines.first()).copied()
    }
}

/// Reads `file` into words of `score` (described by `cmd`), leaving out
/// each key whose flag the command line sets (`on_command_line(id)`): the
/// command line wins. `threshold` and `gold` are the exceptions: the
/// file's come first and the command line's add to them (for the same
/// metric, the command line's wins). Each key's words are
/// parsed alone first, so a value no flag accepts is named by its line.
pub(crate) fn read(
    file: &ConfigFile,
    cmd: &Command,
    on_command_line: &dyn Fn(&str) -> bool,
) -> Result<ConfigWords, Error> {
    let (path, text) = (&file.path, &file.text);
    let table = file.table.clone();
    let mut out = ConfigWords {
        file: file.clone(),
        words: Vec::new(),
        lines: BTreeMap::new(),
    };
    for (key, value) in table {
        let key_line = line_of(text, key.span().start);
        let line = Some(key_line);
        let key = key.into_inner();
        if key == "judge" {
            if !value.is_table() {
                return Err(at(
                    path,
                    line,
                    "`judge` is a table: [judge.metric.NAME] defines a judge metric",
                ));
            }
            if let Some(panel) = value.get("panel") {
                // A judge named on the command line would silently stand
                // for the whole panel: name the judges one way.
                if let Some(flag) = ["judge_url", "judge_model"]
                    .into_iter()
                    .find(|id| on_command_line(id))
                {
                    return Err(at(
                        path,
                        line,
                        &format!(
                            "[judge.panel] names this run's judges, and so does --{} on the \
                             command line: drop one (several --judge-url and --judge-model \
                             flags make a panel too)",
                            flag.replace('_', "-")
                        ),
                    ));
                }
                let words = panel_words(panel, &file.table).map_err(|e| at(path, line, &e))?;
                for (id, word) in words {
                    out.lines.entry(id.to_string()).or_default().push(key_line);
                    out.words.push(word.into());
                }
            }
            if let Some(tiers) = value.get("tier") {
                // A tier flag (--judge-band, …) on the command line replaces
                // the file's chain.
                if !KINDS.iter().any(|k| on_command_line(k.key())) {
                    let words = tier_words(tiers, &file.table).map_err(|e| at(path, line, &e))?;
                    let lines = tier_lines(text);
                    for (k, (key, word)) in words.into_iter().enumerate() {
                        out.lines
                            .entry(key.into())
                            .or_default()
                            .push(lines.get(k).copied().unwrap_or(key_line));
                        out.words.push(word.into());
                    }
                }
            }
            // `[judge] KEY = ...` is the flag judge_KEY, as a key of its own.
            let lines = judge_key_lines(text);
            for (sub, v) in value.as_table().into_iter().flatten() {
                if ["metric", "panel", "tier"].contains(&sub.as_str()) {
                    continue;
                }
                let id = format!("judge_{sub}");
                let sub_line = lines.get(sub).copied().unwrap_or(key_line);
                if file.table.keys().any(|k| *k.get_ref() == id) {
                    return Err(at(
                        path,
                        Some(sub_line),
                        &format!("`judge.{sub}` and `{id}`: name it one way"),
                    ));
                }
                add_key(
                    &mut out,
                    file,
                    cmd,
                    on_command_line,
                    &format!("judge.{sub}"),
                    &id,
                    v.clone(),
                    sub_line,
                )?;
            }
            continue;
        }
        let id = if key == "thresholds" {
            "threshold"
        } else {
            key.as_str()
        };
        add_key(
            &mut out,
            file,
            cmd,
            on_command_line,
            &key,
            id,
            value,
            key_line,
        )?;
    }
    Ok(out)
}

/// The words of one key of the file (`shown` in messages, the flag `id`,
/// at `key_line`), added to `out`; a key whose flag the command line sets
/// is left out (but `threshold` and `gold` add up).
#[allow(clippy::too_many_arguments)]
fn add_key(
    out: &mut ConfigWords,
    file: &ConfigFile,
    cmd: &Command,
    on_command_line: &dyn Fn(&str) -> bool,
    key: &str,
    id: &str,
    value: Value,
    key_line: usize,
) -> Result<(), Error> {
    let (path, text) = (&file.path, &file.text);
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let line = Some(key_line);
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_id().as_str() == id && id != "config")
        .ok_or_else(|| at(path, line, &format!("unknown key `{key}`; keys are the flags of `refscore score --help` with _ for -")))?;
    if on_command_line(id) && id != "threshold" && id != "gold" {
        return Ok(());
    }
    let entry_lines = entry_lines(text, &value, key_line);
    if let (Value::Table(t), "gold") = (&value, id) {
        // A label column is named by a string; `true` is no column.
        if let Some((k, (metric, v))) = t.iter().enumerate().find(|(_, (_, v))| !v.is_str()) {
            return Err(at(
                path,
                entry_lines.get(k).copied(),
                &format!(
                    "`[gold] {metric}`: expected the name of the label column as a string, \
                     not {} (e.g. {metric} = \"human_label\")",
                    v.type_str()
                ),
            ));
        }
    }
    let paths = RELATIVE_PATHS.contains(&id);
    let values = values_of(key, arg, value, paths).map_err(|e| at(path, line, &e))?;
    let values: Vec<String> = if paths {
        values.into_iter().map(|v| relative(&base, v)).collect()
    } else {
        // A feature's values that name files (a recipe file, not a shipped
        // recipe's name) are relative to the config file's folder too.
        values
            .into_iter()
            .map(|v| {
                if refscore_embed::options::names_file_in_config(id, &v) {
                    relative(&base, v)
                } else {
                    v
                }
            })
            .collect()
    };
    let mut words = Vec::new();
    for v in values {
        let lines = out.lines.entry(id.to_string()).or_default();
        lines.push(entry_lines.get(lines.len()).copied().unwrap_or(key_line));
        match (arg.is_positional(), arg.get_action(), arg.get_long()) {
            (true, _, _) => words.push(v.into()),
            (false, ArgAction::SetTrue, Some(long)) => words.push(format!("--{long}").into()),
            (false, _, Some(long)) => words.push(format!("--{long}={v}").into()),
            (false, _, None) => return Err(Error::internal(format!("flag {id} has no long name"))),
        }
    }
    cmd.clone().try_get_matches_from(&words).map_err(|e| {
        at(
            path,
            line,
            &format!("`{key}`: {}", crate::settings::first_line(&e)),
        )
    })?;
    out.words.extend(words);
    Ok(())
}

/// The line of each key of the `[judge]` table (`service_tier = ...`), for
/// the keys that stand for `judge_*` flags; empty where the file spells
/// the table in a shape this does not read (the callers then take the
/// `judge` key's line).
fn judge_key_lines(text: &str) -> BTreeMap<String, usize> {
    #[derive(Deserialize)]
    struct File {
        judge: Option<BTreeMap<Spanned<String>, Value>>,
    }
    let Ok(File { judge: Some(judge) }) = toml::from_str::<File>(text) else {
        return BTreeMap::new();
    };
    judge
        .keys()
        .map(|k| (k.get_ref().clone(), line_of(text, k.span().start)))
        .collect()
}

/// The words `[judge.panel]` stands for: `mode` as `--judge-panel`,
/// `escalate_band` as `--judge-escalate-band`, and each `[[judge.panel.judge]]`
/// (`url`, `model`) as a `--judge-url` and `--judge-model` pair, in order.
fn panel_words(
    panel: &Value,
    file: &BTreeMap<Spanned<String>, Value>,
) -> Result<Vec<(&'static str, String)>, String> {
    let head = "[judge.panel]";
    let t = panel.as_table().ok_or_else(|| {
        format!("{head} is a table: mode, escalate_band and [[judge.panel.judge]] url and model")
    })?;
    if file.keys().any(|k| {
        [
            "judge_url",
            "judge_model",
            "judge_panel",
            "judge_escalate_band",
        ]
        .contains(&k.get_ref().as_str())
    }) {
        return Err(format!(
            "{head} and judge_url, judge_model, judge_panel or judge_escalate_band: name the judges one way"
        ));
    }
    let mut words = Vec::new();
    for (k, v) in t {
        match (k.as_str(), v) {
            ("mode", Value::String(m)) => words.push(("judge_panel", format!("--judge-panel={m}"))),
            ("escalate_band", Value::String(b)) => {
                words.push(("judge_escalate_band", format!("--judge-escalate-band={b}")))
            }
            ("judge", Value::Array(judges)) => {
                for j in judges {
                    let field = |name: &str| {
                        j.get(name).and_then(Value::as_str).map(String::from).ok_or_else(|| {
                            format!("{head} judge: each [[judge.panel.judge]] has a url and a model (strings)")
                        })
                    };
                    words.push(("judge_url", format!("--judge-url={}", field("url")?)));
                    words.push(("judge_model", format!("--judge-model={}", field("model")?)));
                }
            }
            (other, _) => {
                return Err(format!(
                    "{head} {other}: expected mode = \"escalate\" or \"jury\", escalate_band = \"LO..HI\" and [[judge.panel.judge]] tables with url and model"
                ))
            }
        }
    }
    Ok(words)
}

/// The words `[[judge.tier]]` tables stand for, in the file's order (the
/// order the chain runs): each table has one key, a tier kind's name, and
/// stands for that kind's flag (`band = "..."` is a `--judge-band`); with
/// each word, the key of the flag's values.
fn tier_words(
    tiers: &Value,
    file: &BTreeMap<Spanned<String>, Value>,
) -> Result<Vec<(&'static str, String)>, String> {
    let head = "[[judge.tier]]";
    if let Some(kind) = KINDS
        .iter()
        .find(|k| file.keys().any(|f| f.get_ref() == k.key()))
    {
        return Err(format!("{head} and {}: name the tiers one way", kind.key()));
    }
    // Each kind's key with a value of its shape (`band = "METRIC:LO..HI"`)
    // or an example value.
    let keys = |value: fn(&dyn TierKind) -> &'static str| {
        KINDS
            .iter()
            .map(|k| format!("{} = \"{}\"", k.name(), value(*k)))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let Value::Array(tiers) = tiers else {
        return Err(format!(
            "{head}: expected tables, each with {}",
            keys(|k| k.shape())
        ));
    };
    let kind_of = |t: &Value| {
        let t = t.as_table().filter(|t| t.len() == 1)?;
        let (name, value) = t.iter().next()?;
        let kind = KINDS.iter().find(|k| k.name() == name)?;
        Some((kind.key(), flag(*kind), value.as_str()?.to_string()))
    };
    tiers
        .iter()
        .map(|t| match kind_of(t) {
            Some((key, flag, spec)) => Ok((key, format!("{flag}={spec}"))),
            None => Err(format!(
                "{head}: each tier is a table with one key, {} (e.g. {})",
                keys(|k| k.shape()),
                keys(|k| k.example())
            )),
        })
        .collect()
}

/// The line of each `[[judge.tier]]`'s value, in the file's order, so that
/// a bad tier is reported at its own line rather than the first tier's;
/// empty when the file spells the tiers in a shape this does not read (the
/// callers then fall back to the `judge` key's line).
fn tier_lines(text: &str) -> Vec<usize> {
    #[derive(Deserialize)]
    struct File {
        judge: Option<Judge>,
    }
    #[derive(Deserialize)]
    struct Judge {
        tier: Option<Vec<BTreeMap<String, Spanned<String>>>>,
    }
    let Ok(File {
        judge: Some(Judge { tier: Some(tiers) }),
    }) = toml::from_str::<File>(text)
    else {
        return Vec::new();
    };
    tiers
        .iter()
        .filter_map(|t| t.values().next())
        .map(|v| line_of(text, v.span().start))
        .collect()
}

/// The line of each entry of a `[thresholds]` table, in the order the
/// table iterates (by key), so an entry's error names its own line.
fn entry_lines(text: &str, value: &Value, table_line: usize) -> Vec<usize> {
    let Value::Table(t) = value else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    t.keys()
        .map(|k| {
            lines
                .iter()
                .enumerate()
                .skip(table_line.saturating_sub(1))
                .find(|(_, l)| {
                    let l = l.trim_start();
                    l.strip_prefix(k.as_str())
                        .or_else(|| l.strip_prefix(&format!("\"{k}\"")))
                        .is_some_and(|rest| rest.trim_start().starts_with('='))
                })
                .map_or(table_line, |(i, _)| i + 1)
        })
        .collect()
}

/// The flag values a key's TOML value stands for: a switch's `true` is one
/// (its presence), `false` none; a string, number or list item one each; a
/// `thresholds` or `gold` table one `METRIC=VALUE` per entry. A key naming files
/// (`paths`) takes strings only: `judge_metrics = 5` is a mistake, not a
/// file named "5".
fn values_of(key: &str, arg: &Arg, value: Value, paths: bool) -> Result<Vec<String>, String> {
    let scalar = |v: &Value| -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            other if paths => Err(format!(
                "`{key}`: expected a path as a string, not {}",
                other.type_str()
            )),
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
        (_, Value::Table(t)) if ["threshold", "gold"].contains(&arg.get_id().as_str()) => t
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
pub(crate) fn judge_metrics_files(file: &ConfigFile) -> Result<Vec<PathBuf>, Error> {
    let base = file
        .path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    for (key, value) in file.table.clone() {
        if key.get_ref() != "judge_metrics" {
            continue;
        }
        let line = Some(line_of(&file.text, key.span().start));
        let many = Arg::new("judge_metrics").action(ArgAction::Append);
        let names =
            values_of("judge_metrics", &many, value, true).map_err(|e| file.error_at(line, &e))?;
        return Ok(names
            .into_iter()
            .map(|n| PathBuf::from(relative(&base, n)))
            .collect());
    }
    Ok(Vec::new())
}
