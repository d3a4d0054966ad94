//! The few rows a report shows, fetched with their texts after the pass:
//! from the result's `--keep` columns, else from the scoring input joined
//! by id (the result lists rows in input order, so the same ordinals are
//! tried first and checked by id; the input is scanned only for rows that
//! do not line up).

use std::collections::HashMap;
use std::path::Path;

use arrow::array::{Array, ArrayRef};
use arrow::util::display::array_value_to_string;
use refscore_core::{Error, TextColumn};
use refscore_read::{Dataset, ReadOptions, Role, Table};

use crate::run::{self, Run};
use crate::Options;

/// Longest text shown per field; longer ones end in "…".
const MAX_CHARS: usize = 2000;

/// Row ordinals to fetch.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    pub cur: Vec<u64>,
    pub base: Vec<u64>,
}

/// One fetched row.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowTexts {
    pub id: String,
    pub key: u128,
    pub input: Option<String>,
    pub reference: Option<String>,
    pub output: Option<String>,
    pub reason: Option<String>,
}

pub(crate) struct Fetched {
    pub cur: HashMap<u64, RowTexts>,
    pub base: HashMap<u64, RowTexts>,
    pub from: Option<String>,
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_CHARS) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

fn text_at(a: &ArrayRef, i: usize) -> Option<String> {
    match TextColumn::from_array(a) {
        Some(t) => t.get(i).map(clip),
        None if a.is_valid(i) => array_value_to_string(a, i).ok().map(|s| clip(&s)),
        None => None,
    }
}

fn from_run(run: &Run, rows: &[u64]) -> Result<HashMap<u64, RowTexts>, Error> {
    let mut rows = rows.to_vec();
    rows.sort_unstable();
    rows.dedup();
    let mut out = HashMap::new();
    if rows.is_empty() {
        return Ok(out);
    }
    let mut names: Vec<&str> = vec![refscore_core::schema::ID];
    names.extend(run.text_cols.iter().flatten().map(String::as_str));
    names.extend(run.reason_cols.iter().map(String::as_str));
    let mut next = rows.iter();
    let mut keys = Vec::new();
    for batch in run.table.select(&names, &rows)? {
        let batch = batch?;
        run::id_keys(batch.column(0), &mut keys);
        for (i, &key) in keys.iter().enumerate() {
            let Some(&row) = next.next() else { break };
            let mut t = RowTexts {
                id: array_value_to_string(batch.column(0), i).unwrap_or_default(),
                key,
                ..RowTexts::default()
            };
            let mut c = 1;
            for (k, name) in run.text_cols.iter().enumerate() {
                if name.is_some() {
                    let v = text_at(batch.column(c), i);
                    match k {
                        0 => t.input = v,
                        1 => t.reference = v,
                        _ => t.output = v,
                    }
                    c += 1;
                }
            }
            let reasons: Vec<String> = run
                .reason_cols
                .iter()
                .enumerate()
                .filter_map(|(j, name)| {
                    text_at(batch.column(c + j), i).map(|r| format!("{name}: {r}"))
                })
                .collect();
            if !reasons.is_empty() {
                t.reason = Some(reasons.join("\n"));
            }
            out.insert(row, t);
        }
    }
    Ok(out)
}

/// Fills the texts of the roles in `need` (those the result lacks) from the
/// scoring input.
fn from_input(
    o: &Options,
    input: &str,
    rows: &mut HashMap<u64, RowTexts>,
    need: &[Role],
) -> Result<(), Error> {
    let dataset = Dataset::open(
        input,
        &ReadOptions {
            mapping: o.mapping.clone(),
            ..ReadOptions::default()
        },
    )?;
    let c = dataset.columns();
    let roles = [
        (Role::Input, c.input.clone()),
        (Role::Reference, Some(c.reference.clone())),
        (Role::Output, Some(c.output.clone())),
    ];
    let table = Table::open(input)?;
    let mut ordinals: Vec<u64> = rows
        .keys()
        .copied()
        .filter(|r| *r < table.total_rows())
        .collect();
    ordinals.sort_unstable();
    let mut names: Vec<&str> = c.id.iter().map(String::as_str).collect();
    let role_names: Vec<(Role, &str)> = roles
        .iter()
        .filter(|(role, _)| need.contains(role))
        .filter_map(|(role, name)| Some((*role, name.as_deref()?)))
        .collect();
    names.extend(role_names.iter().map(|(_, n)| *n));
    let set = |t: &mut RowTexts, role: Role, v: Option<String>| match role {
        Role::Input => t.input = v,
        Role::Reference => t.reference = v,
        _ => t.output = v,
    };
    // The same ordinals first, checked by id.
    let mut done = std::collections::HashSet::new();
    let mut next = ordinals.iter();
    let mut keys = Vec::new();
    for batch in table.select(&names, &ordinals)? {
        let batch = batch?;
        let off = usize::from(c.id.is_some());
        if c.id.is_some() {
            run::id_keys(batch.column(0), &mut keys);
        } else {
            keys.clear();
        }
        for i in 0..batch.num_rows() {
            let Some(&row) = next.next() else { break };
            let t = rows.get_mut(&row).expect("wanted");
            let key = keys.get(i).copied().unwrap_or(row as u128);
            if key != t.key {
                continue;
            }
            for (j, (role, _)) in role_names.iter().enumerate() {
                set(t, *role, text_at(batch.column(off + j), i));
            }
            done.insert(row);
        }
    }
    if done.len() == rows.len() {
        return Ok(());
    }
    // Rows that do not line up: scan the input by id.
    let mut by_key: HashMap<u128, Vec<u64>> = HashMap::new();
    for (row, t) in rows.iter() {
        if !done.contains(row) {
            by_key.entry(t.key).or_default().push(*row);
        }
    }
    for batch in dataset.batches() {
        let batch = batch?;
        run::id_keys(&batch.id, &mut keys);
        for (i, key) in keys.iter().enumerate() {
            let Some(targets) = by_key.get(key) else {
                continue;
            };
            for row in targets {
                let t = rows.get_mut(row).expect("wanted");
                for (role, _) in &role_names {
                    let col = match role {
                        Role::Input => batch.input.as_ref(),
                        Role::Reference => Some(batch.reference()),
                        _ => Some(batch.output()),
                    };
                    set(t, *role, col.and_then(|c| c.get(i)).map(clip));
                }
            }
            by_key.remove(key);
        }
        if by_key.is_empty() {
            break;
        }
    }
    Ok(())
}

pub(crate) fn fetch(
    o: &Options,
    cur: &Run,
    base: Option<&Run>,
    wanted: &Wanted,
) -> Result<Fetched, Error> {
    let mut cur_rows = from_run(cur, &wanted.cur)?;
    let base_rows = match base {
        Some(b) => from_run(b, &wanted.base)?,
        None => HashMap::new(),
    };
    let in_result = cur.text_cols.iter().any(Option::is_some);
    // The text roles the result did not keep (text_cols is by role).
    let need: Vec<Role> = [Role::Input, Role::Reference, Role::Output]
        .into_iter()
        .zip(&cur.text_cols)
        .filter(|(_, kept)| kept.is_none())
        .map(|(role, _)| role)
        .collect();
    let mut from = in_result.then(|| "result".to_string());
    if let Some(input) = &o.input {
        if !need.is_empty() && !cur_rows.is_empty() {
            from_input(o, input, &mut cur_rows, &need)?;
            from = Some(
                if in_result {
                    "result and input"
                } else {
                    "input"
                }
                .into(),
            );
        }
    }
    Ok(Fetched {
        cur: cur_rows,
        base: base_rows,
        from,
    })
}

/// The `judge` part of `RESULT.summary.json`, when the result is one file
/// with its summary beside it.
pub(crate) fn summary_judge(result: &str) -> Option<serde_json::Value> {
    let path = Path::new(result);
    if !path.is_file() {
        return None;
    }
    let mut name = path.as_os_str().to_owned();
    name.push(".summary.json");
    let text = std::fs::read_to_string(name).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("judge").cloned()
}
