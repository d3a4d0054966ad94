//! Rubrics as definitions: what a `[judge.metric.NAME]` table holds (in the
//! `--config` file or a `--judge-metrics` file), what the built-in rubrics,
//! Meaning Match and the 0–10 similarity rubric, are written as, and the
//! [`Rubric`] each becomes (its template, JSON schema, registry entry and
//! columns, owned by it). The built-ins and the user's go through
//! [`Rubric::build`], so every rubric is asked, read, cached and written by
//! the same code.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use refscore_core::metric::{self, Kind, Metric, MetricRef};
use refscore_core::schema;
use refscore_core::Error;
use serde::Deserialize;
use serde_json::{json, Value};
use toml::Spanned;

use crate::prompts::{Schema, Template};

/// The slots a rubric's prompt may use besides `row.NAME`.
pub(crate) const SLOTS: [&str; 3] = ["input", "reference", "output"];

/// Widest score scale: a score's probabilities are read number by number,
/// and "10" is the longest number read as a whole (see `probs.rs`).
const SCALE_LIMIT: u8 = 10;

/// The kind of answer a rubric asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// true or false, read with P(true); passes where P(true) reaches
    /// `--judge-threshold` (or the sampled word, without probabilities).
    Verdict,
    /// An integer on `min..=max`, read with its probability-weighted
    /// expectation and written normalised to 0..=1.
    Score { min: u8, max: u8 },
}

/// One rubric as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Definition {
    /// The metric's name: its value column and what `--metrics` calls it.
    pub name: String,
    /// A verdict or a score on a scale.
    pub answer: Answer,
    /// A verdict's pass probability (None: `--judge-threshold`), or a
    /// score's lowest passing score on the scale (None: 70% of the way up).
    pub threshold: Option<f64>,
    /// The system message, before the line asking for the JSON answer.
    pub instructions: String,
    /// The user message: a minijinja template over the row.
    pub prompt: String,
    /// Whether `--judge-band cosine:LO..HI` decides it outside the band.
    pub band: bool,
    /// Most tokens of a whole answer (verdict and reason).
    pub max_tokens: u32,
    /// Where it was written ("file:line"), or "built in".
    pub origin: String,
}

/// A rubric ready to ask: one question per row, rendered from its
/// template, answered with a verdict or a score and a reason.
#[derive(Debug)]
pub(crate) struct Rubric {
    /// Its registry entry: name, columns, default threshold.
    pub metric: MetricRef,
    /// What is asked.
    pub template: Template,
    /// A verdict or a score.
    pub answer: Answer,
    /// The JSON keys the answer's value may come under; the first is the
    /// one the prompt asks for (its token probabilities are read).
    pub value_keys: &'static [&'static str],
    /// The JSON keys the reason may come under; the first is the one the
    /// prompt asks for.
    pub reason_keys: &'static [&'static str],
    /// The same answer as the reference (up to case, whitespace, articles
    /// and final punctuation) passes without a call.
    pub same_answer_passes: bool,
    /// The input columns its prompt reads (`row.NAME`), sorted.
    pub columns: Vec<String>,
    /// The definition it was built from.
    pub definition: Definition,
}

impl Rubric {
    /// The name, as `--metrics` and messages use it.
    pub(crate) fn name(&self) -> &str {
        &self.metric.name
    }

    /// The key its value is asked under, and its reason's.
    pub(crate) fn keys(&self) -> (&'static str, &'static str) {
        (self.value_keys[0], self.reason_keys[0])
    }

    /// A verdict's own pass probability, from its definition (None:
    /// `--judge-threshold`).
    pub(crate) fn p_threshold(&self) -> Option<f32> {
        match self.answer {
            Answer::Verdict => self.definition.threshold.map(|t| t as f32),
            Answer::Score { .. } => None,
        }
    }

    /// Whether `--judge-band` decides it outside the band.
    pub(crate) fn band(&self) -> bool {
        self.definition.band
    }

    /// Whether the user defined it.
    pub(crate) fn is_defined(&self) -> bool {
        metric::find(self.name()).is_none()
    }

    /// Turns a definition into a rubric, `shape` saying what a built-in
    /// keeps from before it was a definition.
    fn build(def: Definition, shape: Shape) -> Result<Rubric, String> {
        let mut env = minijinja::Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env.set_keep_trailing_newline(true);
        env.add_template_owned(def.name.clone(), def.prompt.clone())
            .map_err(|e| format!("does not compile: {e:#}"))?;
        let (columns, reads_input) =
            columns_read(&env.get_template(&def.name).map_err(|e| e.to_string())?)?;
        let template = Template {
            name: Cow::Owned(def.name.clone()),
            version: shape.version,
            system: Cow::Owned(system_message(&def, &shape)),
            user: Cow::Owned(def.prompt.clone()),
            jinja: Some(Arc::new(env)),
            schema: Schema::Built(answer_schema(&def, &shape)),
            max_tokens: def.max_tokens,
            structured: true,
        };
        // A prompt that fails on sample values (an unknown filter, say)
        // would fail on every row: say so now.
        let sample: BTreeMap<&str, &str> = columns.iter().map(|c| (c.as_str(), "x")).collect();
        template.render_row(&minijinja::context! {
            input => "x", reference => "x", output => "x", row => sample
        })?;
        let metric = match shape.metric {
            Some(m) => Arc::clone(m),
            None => Arc::new(user_metric(&def, reads_input)),
        };
        Ok(Rubric {
            metric,
            template,
            answer: def.answer,
            value_keys: shape.value_keys,
            reason_keys: shape.reason_keys,
            same_answer_passes: shape.same_answer_passes,
            columns,
            definition: def,
        })
    }
}

/// What the built-in rubrics keep from before they were definitions: their
/// registry entries and column names, the JSON keys their prompts ask for
/// (and older spellings accepted), and the same-answer rule.
struct Shape {
    metric: Option<&'static MetricRef>,
    version: &'static str,
    value_keys: &'static [&'static str],
    reason_keys: &'static [&'static str],
    reason_hint: &'static str,
    same_answer_passes: bool,
}

impl Shape {
    /// A user's rubric: `verdict` or `score`, then `reason`.
    fn user(answer: Answer) -> Shape {
        let (value_keys, reason_hint): (&'static [&'static str], _) = match answer {
            Answer::Verdict => (&["verdict"], "one or two sentences"),
            Answer::Score { .. } => (&["score"], "two to four sentences"),
        };
        Shape {
            metric: None,
            version: "def",
            value_keys,
            reason_keys: &["reason"],
            reason_hint,
            same_answer_passes: false,
        }
    }
}

/// The system message: the instructions, then the line asking for the JSON
/// answer with the rubric's keys.
fn system_message(def: &Definition, shape: &Shape) -> String {
    let value = match def.answer {
        Answer::Verdict => "true or false".to_string(),
        Answer::Score { min, max } => format!("integer {min}-{max}"),
    };
    let mut system = def.instructions.clone();
    if !system.is_empty() && !system.ends_with('\n') {
        system.push('\n');
    }
    system.push_str(&format!(
        "Reply with a JSON object only: {{\"{}\": {value}, \"{}\": \"{}\"}}.",
        shape.value_keys[0], shape.reason_keys[0], shape.reason_hint
    ));
    system
}

/// The JSON schema of the answer: the value before the reason, so a
/// grammar-constrained server writes the short value first.
fn answer_schema(def: &Definition, shape: &Shape) -> Value {
    let value = match def.answer {
        Answer::Verdict => json!({"type": "boolean"}),
        Answer::Score { min, max } => json!({"type": "integer", "minimum": min, "maximum": max}),
    };
    let (v, r) = (shape.value_keys[0], shape.reason_keys[0]);
    json!({"type": "object", "properties": {v: value, r: {"type": "string"}},
           "required": [v, r], "additionalProperties": false})
}

/// The registry entry of a user's rubric: a verdict writes `NAME`,
/// `NAME_p`; a score `NAME_score` (the integer) and `NAME` (on 0..=1); both
/// then `NAME_reason` and `NAME_source`.
fn user_metric(def: &Definition, reads_input: bool) -> Metric {
    let n = &def.name;
    let (kind, default_threshold, columns) = match def.answer {
        Answer::Verdict => (Kind::Binary, 1.0, [n.clone(), format!("{n}_p")]),
        Answer::Score { min, max } => {
            let t = def
                .threshold
                .unwrap_or(f64::from(min) + 0.7 * f64::from(max - min));
            let normalised = (t - f64::from(min)) / f64::from(max - min);
            (Kind::Score, normalised, [format!("{n}_score"), n.clone()])
        }
    };
    let reason = format!("{n}_reason");
    Metric::judge(
        n,
        kind,
        default_threshold,
        &[columns[0].as_str(), columns[1].as_str()],
        Some(&reason),
        reads_input,
    )
}

/// The input columns a prompt reads (`row.NAME`), after checking that it
/// uses only the known slots and reads the output.
fn columns_read(template: &minijinja::Template) -> Result<(Vec<String>, bool), String> {
    let used = template.undeclared_variables(true);
    let mut columns = Vec::new();
    for name in &used {
        if let Some(column) = name.strip_prefix("row.") {
            columns.push(column.to_string());
        } else if name == "row" {
            return Err(
                "name input columns as row.NAME (row alone, or row[...], is not read)".into(),
            );
        } else if !SLOTS.contains(&name.as_str()) {
            return Err(format!(
                "unknown slot '{name}'; slots are input, reference, output and row.COLUMN"
            ));
        }
    }
    if !used.contains("output") {
        return Err(
            "the prompt never shows the output ({{ output }}), so the judge could not judge it"
                .into(),
        );
    }
    columns.sort();
    Ok((columns, used.contains("input")))
}

/// The instructions of Meaning Match.
const MEANING_MATCH_RULES: &str = "You are a strict grader. You compare a candidate answer with a reference answer to the \
same question and decide whether the candidate gives the same core answer: the same fact, entity or value.\n\
Rules:\n\
- Judge only the core answer, not style, tone or length.\n\
- Aliases, synonyms, abbreviations and paraphrases count as the same (\"NYC\" = \"New York City\", \"Da Vinci\" = \"Leonardo da Vinci\").\n\
- Ignore differences of case, punctuation, whitespace, articles, formatting and small typos.\n\
- Digits and number words are equal (\"100\" = \"one hundred\").\n\
- Extra detail is fine unless it changes or contradicts the core answer.\n\
- If the candidate offers the right answer next to wrong alternatives (\"Paris or Lyon\"), it does not match.\n\
- A hedged, uncertain or incomplete answer does not match.\n";

/// The similarity rubric.
const SIMILARITY_RUBRIC: &str = "You are a strict grader. Rate how similar a candidate answer is to a reference answer to the \
same question, on an integer scale from 0 to 10:\n\
10: nearly identical in meaning, structure, accuracy and completeness.\n\
8-9: high overlap; only very minor omissions or differences of phrasing.\n\
6-7: most facts present, but some are partly wrong, incomplete or vague.\n\
4-5: major elements missing or misrepresented.\n\
1-3: very little overlap.\n\
0: unrelated or wrong.\n\
Weigh factual accuracy, completeness, semantic similarity, terminology and structure, and above all the \
precision of quantities, names and categories (doses, figures, units). Be strict: penalise omissions and \
wrong values. Answers may be long or structured (lists, JSON); compare their content.\n";

/// The user message both built-in rubrics send: instructions first (in
/// the system message), the row last, so the server's prompt cache keeps
/// the shared prefix.
const QUESTION_AND_ANSWERS: &str =
    "Question:\n{{ input }}\n\nReference answer:\n{{ reference }}\n\nCandidate answer:\n{{ output }}";

/// Meaning Match and the similarity rubric, as definitions.
pub(crate) fn builtin_rubrics() -> [Rubric; 2] {
    let def = |name: &str, answer, instructions: &str, band, max_tokens| Definition {
        name: name.to_string(),
        answer,
        threshold: None,
        instructions: instructions.to_string(),
        prompt: QUESTION_AND_ANSWERS.to_string(),
        band,
        max_tokens,
        origin: "built in".into(),
    };
    let meaning_match = Rubric::build(
        def(
            "meaning_match",
            Answer::Verdict,
            MEANING_MATCH_RULES,
            true,
            256,
        ),
        Shape {
            metric: Some(&metric::MEANING_MATCH),
            version: "v1",
            value_keys: &["meaning_match", "match"],
            reason_keys: &["reason", "reasons", "explanation"],
            reason_hint: "one or two sentences",
            same_answer_passes: true,
        },
    );
    let similarity = Rubric::build(
        def(
            "similarity",
            Answer::Score { min: 0, max: 10 },
            SIMILARITY_RUBRIC,
            false,
            512,
        ),
        Shape {
            metric: Some(&metric::SIMILARITY),
            version: "v1",
            value_keys: &["score", "similarity_score", "similarity"],
            reason_keys: &["rationale", "reason", "explanation"],
            reason_hint: "two to four sentences",
            same_answer_passes: false,
        },
    );
    [
        meaning_match.expect("Meaning Match's definition builds"),
        similarity.expect("the similarity rubric's definition builds"),
    ]
}

/// A `[judge.metric.NAME]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    answer: Spanned<String>,
    scale: Option<Spanned<Vec<i64>>>,
    threshold: Option<Spanned<f64>>,
    #[serde(default)]
    instructions: String,
    prompt: Spanned<String>,
    band: Option<Spanned<bool>>,
    max_tokens: Option<Spanned<i64>>,
}

/// A file's `[judge.metric.*]` tables (other keys are the config file's).
#[derive(Debug, Deserialize)]
struct FileTables {
    judge: Option<JudgeTable>,
    #[serde(flatten)]
    rest: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JudgeTable {
    #[serde(default)]
    metric: BTreeMap<Spanned<String>, Spanned<Written>>,
    /// `[judge.panel]`: a config file's panel of judges, read as flags by
    /// the CLI's config reader; refused in a judge metrics file.
    #[serde(default)]
    panel: Option<Spanned<toml::Value>>,
    /// `[[judge.tier]]`: a config file's chain of tiers, read as flags by
    /// the CLI's config reader; refused in a judge metrics file.
    #[serde(default)]
    tier: Option<Spanned<toml::Value>>,
}

/// Names a definition may not take: the built-in metrics and their
/// columns, the groups, and the result's fixed columns.
fn reserved(name: &str) -> bool {
    let fixed = [
        schema::ID,
        schema::STATUS,
        schema::ERROR,
        schema::JUDGE_TEMPLATES,
        "all",
    ];
    metric::BUILTIN
        .iter()
        .flat_map(|m| m.output_columns().iter().map(String::as_str))
        .chain(metric::group_names())
        .chain(fixed)
        .chain(schema::JUDGE_USAGE)
        .any(|r| r == name)
}

/// The judge metrics defined in `path`: its `[judge.metric.NAME]` tables.
/// With `only_definitions` (a `--judge-metrics` file) any other key is an
/// error; in a config file the other keys are flags. Every check is made
/// here, before any call: the error (78) names the file, line and key.
pub(crate) fn read(path: &Path, text: &str, only_definitions: bool) -> Result<Vec<Rubric>, Error> {
    let parsed = toml::de::DeTable::parse(text).map_err(|e| toml_error(path, text, &e))?;
    read_parsed(path, text, parsed, only_definitions)
}

/// The configuration error for TOML that does not parse or does not fit,
/// at its line.
fn toml_error(path: &Path, text: &str, e: &toml::de::Error) -> Error {
    let offset = e.span().map_or(0, |s| s.start);
    let line = text[..offset.min(text.len())].matches('\n').count() + 1;
    Error::config(format!("{}:{line}: {}", path.display(), e.message().trim()))
}

/// [`read`] of a file already parsed as `parsed` (a config file is parsed
/// once, for its flags and its definitions).
pub(crate) fn read_parsed(
    path: &Path,
    text: &str,
    parsed: Spanned<toml::de::DeTable<'_>>,
    only_definitions: bool,
) -> Result<Vec<Rubric>, Error> {
    let at = |offset: usize, msg: &str| {
        let line = text[..offset.min(text.len())].matches('\n').count() + 1;
        Error::config(format!("{}:{line}: {msg}", path.display()))
    };
    let mut parsed = parsed;
    // A config file's `[judge] KEY = ...` are flags (judge_KEY), read by
    // the CLI's config reader: only the tables are definitions here.
    let mut flag_keys: Vec<(String, usize)> = Vec::new();
    if let Some(toml::de::DeValue::Table(judge)) =
        parsed.get_mut().get_mut("judge").map(|v| v.get_mut())
    {
        flag_keys = judge
            .keys()
            .filter(|k| !["metric", "panel", "tier"].contains(&k.get_ref().as_ref()))
            .map(|k| (k.get_ref().to_string(), k.span().start))
            .collect();
        for (key, _) in &flag_keys {
            judge.remove(key.as_str());
        }
    }
    if only_definitions {
        if let Some((key, offset)) = flag_keys.first() {
            return Err(at(
                *offset,
                &format!("judge.{key} belongs in a config file (--config); a judge metrics file holds [judge.metric.NAME] tables only"),
            ));
        }
    }
    let file = FileTables::deserialize(toml::de::Deserializer::from(parsed))
        .map_err(|e| toml_error(path, text, &e))?;
    if only_definitions {
        if let Some(key) = file.rest.keys().next() {
            // The key's line: the first line that starts with it.
            let offset = text
                .match_indices(key.as_str())
                .map(|(i, _)| i)
                .find(|&i| {
                    text[..i]
                        .rsplit('\n')
                        .next()
                        .is_some_and(|l| l.trim_start_matches('[').trim().is_empty())
                })
                .unwrap_or(0);
            return Err(at(
                offset,
                &format!("unknown key `{key}`; a judge metrics file holds [judge.metric.NAME] tables only"),
            ));
        }
    }
    if only_definitions {
        let judge = file.judge.as_ref();
        for (table, value) in [
            ("[judge.panel]", judge.and_then(|j| j.panel.as_ref())),
            ("[[judge.tier]]", judge.and_then(|j| j.tier.as_ref())),
        ] {
            if let Some(value) = value {
                return Err(at(
                    value.span().start,
                    &format!("{table} belongs in a config file (--config); a judge metrics file holds [judge.metric.NAME] tables only"),
                ));
            }
        }
    }
    let mut out = Vec::new();
    for (name, written) in file.judge.map(|j| j.metric).unwrap_or_default() {
        let table_at = name.span().start;
        let name = name.into_inner();
        let head = format!("[judge.metric.{name}]");
        let key_error =
            |key: &str, offset: usize, why: &str| at(offset, &format!("{head} {key}: {why}"));
        let valid_name = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_name {
            return Err(at(table_at, &format!("{head}: a metric name is lower-case letters, digits and _, starting with a letter (at most 64)")));
        }
        if reserved(&name) {
            return Err(at(table_at, &format!("{head}: '{name}' is already a built-in metric, group or result column; choose another name")));
        }
        let w = written.into_inner();
        let answer = match (w.answer.get_ref().as_str(), &w.scale) {
            ("verdict", None) => Answer::Verdict,
            ("verdict", Some(s)) => {
                return Err(key_error("scale", s.span().start, "only a score (answer = \"score\") has a scale"))
            }
            ("score", None) => {
                return Err(key_error("scale", w.answer.span().start, "a score needs its scale, e.g. scale = [1, 5]"))
            }
            ("score", Some(s)) => match s.get_ref()[..] {
                [min, max] if 0 <= min && min < max && max <= i64::from(SCALE_LIMIT) => {
                    Answer::Score { min: min as u8, max: max as u8 }
                }
                _ => {
                    return Err(key_error("scale", s.span().start, &format!("{:?} is not a scale: two integers [MIN, MAX] with 0 <= MIN < MAX <= {SCALE_LIMIT}", s.get_ref())))
                }
            },
            (other, _) => {
                return Err(key_error("answer", w.answer.span().start, &format!("'{other}': expected \"verdict\" or \"score\"")))
            }
        };
        let threshold = match (&w.threshold, answer) {
            (None, _) => None,
            (Some(t), Answer::Verdict) if !(0.0..=1.0).contains(t.get_ref()) => {
                return Err(key_error("threshold", t.span().start, &format!("{}: a verdict passes where P(true) reaches its threshold, a probability within 0..1", t.get_ref())))
            }
            (Some(t), Answer::Score { min, max })
                if !(f64::from(min)..=f64::from(max)).contains(t.get_ref()) =>
            {
                return Err(key_error("threshold", t.span().start, &format!("{} is outside the scale [{min}, {max}]", t.get_ref())))
            }
            (Some(t), _) => Some(*t.get_ref()),
        };
        let max_tokens = match &w.max_tokens {
            None if answer == Answer::Verdict => 256,
            None => 512,
            Some(m) if (16..=8192).contains(m.get_ref()) => *m.get_ref() as u32,
            Some(m) => {
                return Err(key_error(
                    "max_tokens",
                    m.span().start,
                    &format!("{}: expected 16 to 8192", m.get_ref()),
                ))
            }
        };
        let band =
            match (&w.band, answer) {
                (Some(b), Answer::Score { .. }) if *b.get_ref() => return Err(key_error(
                    "band",
                    b.span().start,
                    "only a verdict is decided by the cosine band (above it true, below it false)",
                )),
                (b, _) => b.as_ref().is_some_and(|b| *b.get_ref()),
            };
        if w.prompt.get_ref().trim().is_empty() {
            return Err(key_error("prompt", w.prompt.span().start, "is empty"));
        }
        let def = Definition {
            name: name.clone(),
            answer,
            threshold,
            instructions: w.instructions,
            prompt: w.prompt.get_ref().clone(),
            band,
            max_tokens,
            origin: format!(
                "{}:{}",
                path.display(),
                text[..table_at].matches('\n').count() + 1
            ),
        };
        let built = Rubric::build(def, Shape::user(answer))
            .map_err(|e| key_error("prompt", w.prompt.span().start, &e))?;
        if let Some(c) = built.metric.output_columns().iter().find(|c| reserved(c)) {
            return Err(at(
                table_at,
                &format!(
                    "{head}: its column '{c}' is a built-in result column; choose another name"
                ),
            ));
        }
        out.push(built);
    }
    Ok(out)
}

/// A definition as TOML, for `refscore judge-metrics --show`: what a user
/// copies to start a rubric of their own.
pub(crate) fn to_toml(def: &Definition) -> String {
    // A multi-line literal string where it can hold the text (no ''',
    // no control character but tab and newline, which a literal string
    // cannot hold); else a basic string, which escapes them.
    let text = |s: &str| {
        let literal_ok =
            !s.contains("'''") && s.chars().all(|c| !c.is_control() || c == '\n' || c == '\t');
        if s.contains('\n') && literal_ok {
            format!("'''\n{s}'''")
        } else {
            toml::Value::String(s.to_string()).to_string()
        }
    };
    let mut out = format!("[judge.metric.{}]\n", def.name);
    match def.answer {
        Answer::Verdict => out.push_str("answer = \"verdict\"\n"),
        Answer::Score { min, max } => {
            out.push_str(&format!("answer = \"score\"\nscale = [{min}, {max}]\n"))
        }
    }
    if let Some(t) = def.threshold {
        out.push_str(&format!("threshold = {t}\n"));
    }
    out.push_str(&format!(
        "band = {}\nmax_tokens = {}\n",
        def.band, def.max_tokens
    ));
    if !def.instructions.is_empty() {
        out.push_str(&format!("instructions = {}\n", text(&def.instructions)));
    }
    out.push_str(&format!("prompt = {}\n", text(&def.prompt)));
    out
}

#[cfg(test)]
mod tests;
