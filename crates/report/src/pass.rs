//! The one pass over the runs: reading, aggregation and pairing, batch by
//! batch (`finish.rs` turns the totals into the report).

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, ArrayRef, RecordBatch};
use refscore_core::metric;
use refscore_core::schema::{ERROR, ID, STATUS};
use refscore_core::{Error, TextColumn};
use refscore_read::{Dataset, ReadOptions, Table, TableBatches};

use refscore_stats::{Histogram as ValueHistogram, Tally};

use crate::agg::{sortable, FastMap, FlipEntry, LowEntry, Lowest, Paired, Slicer};
use crate::model::*;
use crate::run::{self, col, Run};
use crate::Options;

const BATCH: usize = 64 * 1024;
const MAX_ERROR_REASONS: usize = 1000;
const EXAMPLES: usize = 5;
const NO_ROW: u64 = u64::MAX;
const NO_STATUS: u8 = u8::MAX;

/// Where the `--by` column is read.
pub(crate) enum SliceSource {
    Result(String),
    /// Input table, its id column (None: row ordinals), the column.
    Input(Table, Option<String>, String),
}

pub(crate) struct SliceAcc {
    pub(crate) rows: u64,
    pub(crate) cur: Vec<Tally>,
    pub(crate) paired: Vec<Paired>,
}

#[derive(Default)]
pub(crate) struct JudgeAcc {
    pub(crate) sums: [u64; 3],
    pub(crate) requested: u64,
    pub(crate) judged: u64,
    pub(crate) sources: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Everything gathered in the pass.
pub(crate) struct Agg {
    pub(crate) thresholds: Vec<Option<f64>>,
    pub(crate) rows: u64,
    pub(crate) cur: Vec<Tally>,
    pub(crate) cur_hist: Vec<ValueHistogram>,
    pub(crate) base_rows: u64,
    pub(crate) base: Vec<Tally>,
    pub(crate) base_hist: Vec<ValueHistogram>,
    pub(crate) paired: Vec<Paired>,
    pub(crate) lowest: Vec<Lowest<LowEntry>>,
    pub(crate) down: Vec<Lowest<FlipEntry>>,
    pub(crate) up: Vec<Lowest<FlipEntry>>,
    pub(crate) status_names: Vec<String>,
    pub(crate) statuses: Vec<u64>,
    pub(crate) base_statuses: Vec<u64>,
    pub(crate) status_changes: HashMap<(u8, u8), u64>,
    pub(crate) errors: HashMap<String, u64>,
    pub(crate) base_errors: HashMap<String, u64>,
    pub(crate) judge: JudgeAcc,
    pub(crate) slicer: Slicer,
    pub(crate) slices: Vec<SliceAcc>,
    pub(crate) matched: u64,
    pub(crate) only_cur: u64,
    pub(crate) only_cur_examples: Vec<u64>,
    pub(crate) only_base: u64,
    pub(crate) only_base_examples: Vec<u64>,
    pub(crate) duplicates: u64,
    // scratch
    pub(crate) vals: Vec<Vec<f32>>,
    pub(crate) keys: Vec<u128>,
    pub(crate) status: Vec<u8>,
    pub(crate) slice_ids: Vec<u32>,
}

impl Agg {
    fn new(m: usize, thresholds: Vec<Option<f64>>, lowest: usize, flips: usize) -> Agg {
        Agg {
            thresholds,
            rows: 0,
            cur: vec![Tally::default(); m],
            cur_hist: (0..m).map(|_| ValueHistogram::new()).collect(),
            base_rows: 0,
            base: vec![Tally::default(); m],
            base_hist: (0..m).map(|_| ValueHistogram::new()).collect(),
            paired: (0..m).map(|_| Paired::new(true)).collect(),
            lowest: (0..m).map(|_| Lowest::new(lowest)).collect(),
            down: (0..m).map(|_| Lowest::new(flips)).collect(),
            up: (0..m).map(|_| Lowest::new(flips)).collect(),
            status_names: Vec::new(),
            statuses: Vec::new(),
            base_statuses: Vec::new(),
            status_changes: HashMap::new(),
            errors: HashMap::new(),
            base_errors: HashMap::new(),
            judge: JudgeAcc::default(),
            slicer: Slicer::new(),
            slices: Vec::new(),
            matched: 0,
            only_cur: 0,
            only_cur_examples: Vec::new(),
            only_base: 0,
            only_base_examples: Vec::new(),
            duplicates: 0,
            vals: vec![Vec::new(); m],
            keys: Vec::new(),
            status: Vec::new(),
            slice_ids: Vec::new(),
        }
    }

    fn status_ids(&mut self, a: &ArrayRef, out: &mut Vec<u8>) {
        out.clear();
        let Some(t) = TextColumn::from_array(a) else {
            out.resize(a.len(), NO_STATUS);
            return;
        };
        for i in 0..t.len() {
            let s = t.get(i).unwrap_or("(null)");
            let k = match self.status_names.iter().position(|n| n == s) {
                Some(k) => k,
                None if self.status_names.len() < 250 => {
                    self.status_names.push(s.to_string());
                    self.statuses.push(0);
                    self.base_statuses.push(0);
                    self.status_names.len() - 1
                }
                None => NO_STATUS as usize,
            };
            out.push(k as u8);
        }
    }

    fn base_stats(&mut self, vals: &[Vec<f32>], status: &[u8]) {
        for (k, v) in vals.iter().enumerate() {
            let t = self.thresholds[k];
            for &x in v {
                if x.is_finite() {
                    self.base[k].add(x as f64, t);
                    self.base_hist[k].add(x as f64);
                }
            }
        }
        for &s in status {
            if s != NO_STATUS {
                self.base_statuses[s as usize] += 1;
            }
        }
        self.base_rows += status.len() as u64;
    }
}

fn count_errors(map: &mut HashMap<String, u64>, a: &ArrayRef) {
    let Some(t) = TextColumn::from_array(a) else {
        return;
    };
    for i in 0..t.len() {
        if let Some(e) = t.get(i) {
            if let Some(c) = map.get_mut(e) {
                *c += 1;
            } else if map.len() < MAX_ERROR_REASONS {
                map.insert(e.to_string(), 1);
            } else {
                *map.entry("(other reasons)".into()).or_default() += 1;
            }
        }
    }
}

/// The baseline's scores held by id, for runs whose rows do not line up.
pub(crate) struct BaseStore {
    pub(crate) map: FastMap<u128, u32>,
    pub(crate) vals: Vec<f32>,
    pub(crate) status: Vec<u8>,
    pub(crate) matched: Vec<bool>,
}

/// A stream of record batches read a chosen number of rows at a time, so
/// streams cut into batches differently can be walked side by side.
struct Cursor<'a> {
    it: TableBatches<'a>,
    batch: Option<RecordBatch>,
    off: usize,
}

impl<'a> Cursor<'a> {
    fn new(it: TableBatches<'a>) -> Cursor<'a> {
        Cursor {
            it,
            batch: None,
            off: 0,
        }
    }

    fn avail(&mut self) -> Result<usize, Error> {
        loop {
            if let Some(b) = &self.batch {
                if self.off < b.num_rows() {
                    return Ok(b.num_rows() - self.off);
                }
            }
            match self.it.next() {
                None => {
                    self.batch = None;
                    return Ok(0);
                }
                Some(b) => {
                    self.batch = Some(b?);
                    self.off = 0;
                }
            }
        }
    }

    fn take(&mut self, n: usize) -> RecordBatch {
        let b = self.batch.as_ref().expect("avail first").slice(self.off, n);
        self.off += n;
        b
    }
}

/// The sign that orders a metric's values worst first when sorted
/// ascending: 1 where higher is better, -1 where lower is (the metric
/// registry's direction), so the rows the report lists as the worst are.
pub(crate) fn worst_first(metric: &str) -> f32 {
    if metric::Direction::of(metric).lower_is_better() {
        -1.0
    } else {
        1.0
    }
}

pub(crate) struct Ctx<'a> {
    pub(crate) options: &'a Options,
    pub(crate) cur: &'a Run,
    pub(crate) base: Option<&'a Run>,
    pub(crate) metrics: Vec<String>,
    pub(crate) slices: Option<SliceSource>,
}

enum Outcome {
    Done(Box<Agg>),
    Misaligned,
}

pub(crate) fn build(options: &Options) -> Result<Report, Error> {
    let cur = Run::open(&options.result, &options.result_source)?;
    let base = (options.baseline.as_deref())
        .map(|b| Run::open(b, &options.baseline_source))
        .transpose()?;
    if let Some(b) = &base {
        check_comparable(&cur, b)?;
    }
    let metrics = cur.metrics.clone();
    check_gates(options, &metrics, base.is_some())?;
    // A built-in metric's threshold may name one the run did not compute;
    // any other name must be one of the result's metrics (a defined judge
    // metric), or the threshold would be ignored unseen.
    for (name, _) in &options.thresholds {
        if metric::find(name).is_none() && !metrics.contains(name) {
            return Err(Error::usage(format!(
                "--threshold {name}=…: {} has no metric '{name}' (its metrics: {})",
                cur.shown,
                metrics.join(", ")
            )));
        }
    }
    let slices = match &options.by {
        None => None,
        Some(by) => Some(slice_source(options, &cur, by)?),
    };
    let ctx = Ctx {
        options,
        cur: &cur,
        base: base.as_ref(),
        metrics,
        slices,
    };
    let (agg, method) = match ctx.base {
        None => (single(&ctx, None)?, None),
        Some(_) => match aligned(&ctx)? {
            Outcome::Done(a) => (a, Some("aligned")),
            Outcome::Misaligned => (hashed(&ctx)?, Some("hashed")),
        },
    };
    if let Some(b) = ctx.base {
        if agg.matched == 0 && agg.rows > 0 && agg.base_rows > 0 {
            return Err(Error::bad_input(format!(
                "{} and {}: no id is in both runs, so nothing can be compared (is the baseline a run over the same input?)",
                cur.shown, b.shown
            )));
        }
    }
    crate::finish::finish(&ctx, *agg, method)
}

fn check_comparable(cur: &Run, base: &Run) -> Result<(), Error> {
    let mut a = cur.metrics.clone();
    let mut b = base.metrics.clone();
    a.sort();
    b.sort();
    if a != b {
        let only = |x: &[String], y: &[String]| {
            x.iter()
                .filter(|m| !y.contains(m))
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (ra, rb) = (only(&a, &b), only(&b, &a));
        let mut what = Vec::new();
        if !ra.is_empty() {
            what.push(format!("only the result has {ra}"));
        }
        if !rb.is_empty() {
            what.push(format!("only the baseline has {rb}"));
        }
        return Err(Error::bad_input(format!(
            "{} and {}: the runs have different metrics ({}); score both with the same --metrics",
            cur.shown,
            base.shown,
            what.join("; ")
        )));
    }
    let (ka, kb) = (
        run::id_kind(cur.id_field.data_type()),
        run::id_kind(base.id_field.data_type()),
    );
    if ka != kb {
        return Err(Error::bad_input(format!(
            "{}: column 'id' has type {}, but {}: column 'id' has type {}; rows can only be joined by ids of the same kind",
            cur.shown,
            cur.id_field.data_type(),
            base.shown,
            base.id_field.data_type()
        )));
    }
    Ok(())
}

fn check_gates(options: &Options, metrics: &[String], baseline: bool) -> Result<(), Error> {
    if options.gates.is_empty() {
        return Ok(());
    }
    if !baseline {
        return Err(Error::usage(
            "--fail-on-regression needs --baseline PREVIOUS to compare with",
        ));
    }
    for g in &options.gates {
        if g.metric != "all" && !metrics.contains(&g.metric) {
            return Err(Error::config(format!(
                "--fail-on-regression {}: the result has no metric '{}' (metrics: {})",
                g.metric,
                g.metric,
                metrics.join(", ")
            )));
        }
    }
    Ok(())
}

fn slice_source(options: &Options, cur: &Run, by: &str) -> Result<SliceSource, Error> {
    let schema = cur.table.schema();
    if schema.index_of(by).is_ok() {
        if cur.metrics.iter().any(|m| m == by) || by == ID {
            return Err(Error::config(format!(
                "--by {by}: that is the result's id or a metric, not a category column"
            )));
        }
        return Ok(SliceSource::Result(by.to_string()));
    }
    let Some(input) = &options.input else {
        return Err(Error::config(format!(
            "--by {by}: {} has no column '{by}' (keep it with `score --keep {by}`, or pass --input INPUT)",
            cur.shown
        )));
    };
    let dataset = Dataset::open(
        input,
        &ReadOptions {
            mapping: options.mapping.clone(),
            ..ReadOptions::default()
        },
    )?;
    let table = Table::open(input)?;
    table.field(by).map_err(|_| {
        Error::config(format!(
            "--by {by}: neither {} nor the input {input} has a column '{by}'",
            cur.shown
        ))
    })?;
    if table.total_rows() != cur.table.total_rows() {
        return Err(Error::bad_input(format!(
            "--by {by} from --input {input}: the input has {} rows but {} has {}; pass the input the result was scored from",
            table.total_rows(),
            cur.shown,
            cur.table.total_rows()
        )));
    }
    let id = dataset.columns().id.clone();
    Ok(SliceSource::Input(table, id, by.to_string()))
}

/// Each metric's pass threshold: the report's `--threshold`, else the one
/// the result records (what its summary used), else the registry's default.
fn thresholds(ctx: &Ctx) -> Vec<Option<f64>> {
    let find =
        |list: &[(String, f64)], m: &str| list.iter().rev().find(|(n, _)| n == m).map(|(_, t)| *t);
    ctx.metrics
        .iter()
        .map(|m| {
            find(&ctx.options.thresholds, m)
                .or_else(|| find(&ctx.cur.thresholds, m))
                .or_else(|| metric::find(m).map(|d| d.default_threshold))
        })
        .collect()
}

fn new_agg(ctx: &Ctx) -> Agg {
    Agg::new(
        ctx.metrics.len(),
        thresholds(ctx),
        ctx.options.lowest,
        if ctx.base.is_some() {
            ctx.options.flips
        } else {
            0
        },
    )
}

/// The result's columns read in the pass.
fn cur_columns(ctx: &Ctx) -> Vec<String> {
    let r = ctx.cur;
    let mut names = vec![ID.to_string()];
    names.extend(ctx.metrics.iter().cloned());
    names.push(STATUS.into());
    if r.has_error {
        names.push(ERROR.into());
    }
    names.extend(r.judge_cols.iter().cloned());
    names.extend(r.source_cols.iter().cloned());
    if let Some(SliceSource::Result(c)) = &ctx.slices {
        if !names.contains(c) {
            names.push(c.clone());
        }
    }
    names
}

fn base_columns(ctx: &Ctx, base: &Run) -> Vec<String> {
    let mut names = vec![ID.to_string()];
    names.extend(ctx.metrics.iter().cloned());
    names.push(STATUS.into());
    if base.has_error {
        names.push(ERROR.into());
    }
    names
}

fn input_columns(id: &Option<String>, by: &str) -> Vec<String> {
    id.iter().cloned().chain([by.to_string()]).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The baseline side of a chunk of result rows.
struct BaseChunk {
    vals: Vec<Vec<f32>>,
    rows: Vec<u64>,
    status: Vec<u8>,
}

impl BaseChunk {
    /// An empty chunk for `m` metrics.
    fn new(m: usize) -> BaseChunk {
        BaseChunk {
            vals: vec![Vec::new(); m],
            rows: Vec::new(),
            status: Vec::new(),
        }
    }
}

/// The input file's reader when slices come from it (`--input --by`), with
/// whether it has an id column and the slice column's name.
fn input_cursor<'a>(ctx: &'a Ctx) -> Result<Option<(Cursor<'a>, bool, String)>, Error> {
    Ok(match &ctx.slices {
        Some(SliceSource::Input(t, id, by)) => Some((
            Cursor::new(t.batches(&strs(&input_columns(id, by)), BATCH)?),
            id.is_some(),
            by.clone(),
        )),
        _ => None,
    })
}

/// One run alone, or the result side of the hashed join.
fn single(ctx: &Ctx, store: Option<(&mut BaseStore, Agg)>) -> Result<Box<Agg>, Error> {
    let (mut store, mut agg) = match store {
        Some((s, a)) => (Some(s), a),
        None => (None, new_agg(ctx)),
    };
    let names = cur_columns(ctx);
    let mut cur = Cursor::new(ctx.cur.table.batches(&strs(&names), BATCH)?);
    let mut inp = input_cursor(ctx)?;
    let m = ctx.metrics.len();
    let mut base_chunk = BaseChunk::new(m);
    loop {
        let mut n = cur.avail()?;
        if n == 0 {
            break;
        }
        if let Some((c, _, _)) = inp.as_mut() {
            n = n.min(c.avail()?);
        }
        let batch = cur.take(n);
        let input = inp
            .as_mut()
            .map(|(c, has_id, by)| (c.take(n), *has_id, by.clone()));
        let first_row = agg.rows;
        let base = match store.as_deref_mut() {
            None => None,
            Some(s) => {
                run::id_keys(col(&batch, ID), &mut agg.keys);
                base_chunk.rows.clear();
                base_chunk.status.clear();
                for v in base_chunk.vals.iter_mut() {
                    v.clear();
                }
                for (i, key) in agg.keys.iter().enumerate() {
                    match s.map.get(key) {
                        Some(&b) => {
                            let b = b as usize;
                            s.matched[b] = true;
                            base_chunk.rows.push(b as u64);
                            base_chunk.status.push(s.status[b]);
                            for (k, v) in base_chunk.vals.iter_mut().enumerate() {
                                v.push(s.vals[b * m + k]);
                            }
                        }
                        None => {
                            base_chunk.rows.push(NO_ROW);
                            base_chunk.status.push(NO_STATUS);
                            for v in base_chunk.vals.iter_mut() {
                                v.push(f32::NAN);
                            }
                            if agg.only_cur_examples.len() < EXAMPLES {
                                agg.only_cur_examples.push(first_row + i as u64);
                            }
                            agg.only_cur += 1;
                        }
                    }
                }
                Some(&base_chunk)
            }
        };
        chunk(ctx, &mut agg, &batch, base, input.as_ref(), false)?;
    }
    Ok(Box::new(agg))
}

/// Both runs list the same ids in the same order: read them side by side.
fn aligned(ctx: &Ctx) -> Result<Outcome, Error> {
    let base = ctx.base.expect("baseline");
    let mut agg = new_agg(ctx);
    let names = cur_columns(ctx);
    let bnames = base_columns(ctx, base);
    let mut cur = Cursor::new(ctx.cur.table.batches(&strs(&names), BATCH)?);
    let mut bas = Cursor::new(base.table.batches(&strs(&bnames), BATCH)?);
    let mut inp = input_cursor(ctx)?;
    let m = ctx.metrics.len();
    let mut bc = BaseChunk::new(m);
    let mut bkeys = Vec::new();
    let mut bstatus = Vec::new();
    loop {
        let nc = cur.avail()?;
        let nb = bas.avail()?;
        if nc == 0 || nb == 0 {
            if nc != nb {
                return Ok(Outcome::Misaligned);
            }
            break;
        }
        let mut n = nc.min(nb);
        if let Some((c, _, _)) = inp.as_mut() {
            n = n.min(c.avail()?);
        }
        let batch = cur.take(n);
        let bbatch = bas.take(n);
        run::id_keys(col(&batch, ID), &mut agg.keys);
        run::id_keys(col(&bbatch, ID), &mut bkeys);
        if agg.keys != bkeys {
            return Ok(Outcome::Misaligned);
        }
        for (k, name) in ctx.metrics.iter().enumerate() {
            run::metric_values(col(&bbatch, name), &mut bc.vals[k]);
        }
        agg.status_ids(col(&bbatch, STATUS), &mut bstatus);
        bc.status.clone_from(&bstatus);
        bc.rows.clear();
        bc.rows.extend(agg.base_rows..agg.base_rows + n as u64);
        if base.has_error {
            count_errors(&mut agg.base_errors, col(&bbatch, ERROR));
        }
        agg.base_stats(&bc.vals, &bc.status);
        let input = inp
            .as_mut()
            .map(|(c, has_id, by)| (c.take(n), *has_id, by.clone()));
        chunk(ctx, &mut agg, &batch, Some(&bc), input.as_ref(), true)?;
    }
    Ok(Outcome::Done(Box::new(agg)))
}

/// The runs' rows do not line up: hold the baseline's scores by id.
fn hashed(ctx: &Ctx) -> Result<Box<Agg>, Error> {
    let base = ctx.base.expect("baseline");
    let mut agg = new_agg(ctx);
    let m = ctx.metrics.len();
    let rows = base.table.total_rows() as usize;
    let mut store = BaseStore {
        map: FastMap::default(),
        vals: Vec::with_capacity(rows * m),
        status: Vec::with_capacity(rows),
        matched: vec![false; rows],
    };
    store.map.reserve(rows);
    let bnames = base_columns(ctx, base);
    let mut vals = vec![Vec::new(); m];
    let mut keys = Vec::new();
    let mut status = Vec::new();
    for batch in base.table.batches(&strs(&bnames), BATCH)? {
        let batch = batch?;
        run::id_keys(col(&batch, ID), &mut keys);
        for (k, name) in ctx.metrics.iter().enumerate() {
            run::metric_values(col(&batch, name), &mut vals[k]);
        }
        agg.status_ids(col(&batch, STATUS), &mut status);
        if base.has_error {
            count_errors(&mut agg.base_errors, col(&batch, ERROR));
        }
        agg.base_stats(&vals, &status);
        for (i, key) in keys.iter().enumerate() {
            let ordinal = store.status.len() as u32;
            match store.map.entry(*key) {
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(ordinal);
                }
                std::collections::hash_map::Entry::Occupied(_) => {
                    // The first row with this id is the one compared.
                    agg.duplicates += 1;
                    store.matched[ordinal as usize] = true;
                }
            }
            store.status.push(status[i]);
            for v in &vals {
                store.vals.push(v[i]);
            }
        }
    }
    store.matched.resize(store.status.len(), false);
    let mut agg = *single(ctx, Some((&mut store, agg)))?;
    let marked = store.matched.iter().filter(|m| **m).count() as u64;
    agg.matched = marked - agg.duplicates;
    agg.only_base = store.matched.len() as u64 - marked;
    let mut examples = Vec::new();
    for (i, m) in store.matched.iter().enumerate() {
        if !*m && examples.len() < EXAMPLES {
            examples.push(i as u64);
        }
    }
    agg.only_base_examples = examples;
    Ok(Box::new(agg))
}

/// Adds one chunk of result rows (with their baseline rows, if any).
fn chunk(
    ctx: &Ctx,
    agg: &mut Agg,
    batch: &RecordBatch,
    base: Option<&BaseChunk>,
    input: Option<&(RecordBatch, bool, String)>,
    aligned: bool,
) -> Result<(), Error> {
    let n = batch.num_rows();
    let first_row = agg.rows;
    agg.rows += n as u64;
    let mut status = std::mem::take(&mut agg.status);
    agg.status_ids(col(batch, STATUS), &mut status);
    for &s in &status {
        if s != NO_STATUS {
            agg.statuses[s as usize] += 1;
        }
    }
    if ctx.cur.has_error {
        count_errors(&mut agg.errors, col(batch, ERROR));
    }
    judge(ctx, agg, batch);
    // Slices.
    let mut slice_ids = std::mem::take(&mut agg.slice_ids);
    let sliced = match (&ctx.slices, input) {
        (Some(SliceSource::Result(c)), _) => {
            run::slice_ids(col(batch, c), &mut agg.slicer, &mut slice_ids)?;
            true
        }
        (Some(SliceSource::Input(..)), Some((ib, has_id, by))) => {
            let mut keys = Vec::new();
            if *has_id {
                run::id_keys(ib.column(0), &mut keys);
            } else {
                keys.extend((first_row..first_row + n as u64).map(|r| r as u128));
            }
            let mut ck = Vec::new();
            run::id_keys(col(batch, ID), &mut ck);
            if let Some(i) = (0..n).find(|&i| keys[i] != ck[i]) {
                return Err(Error::bad_input(format!(
                    "--by {by} from --input: row {} of the input has another id than row {} of {}; pass the input the result was scored from, or keep the column with `score --keep {by}`",
                    first_row + i as u64,
                    first_row + i as u64,
                    ctx.cur.shown
                )));
            }
            run::slice_ids(
                ib.column(ib.num_columns() - 1),
                &mut agg.slicer,
                &mut slice_ids,
            )?;
            true
        }
        _ => false,
    };
    if sliced {
        let m = ctx.metrics.len();
        let with_base = base.is_some();
        while agg.slices.len() < agg.slicer.names.len() {
            agg.slices.push(SliceAcc {
                rows: 0,
                cur: vec![Tally::default(); m],
                paired: if with_base {
                    (0..m).map(|_| Paired::new(false)).collect()
                } else {
                    Vec::new()
                },
            });
        }
        for &s in &slice_ids {
            agg.slices[s as usize].rows += 1;
        }
    }
    // Metrics.
    let mut vals = std::mem::take(&mut agg.vals);
    for (k, name) in ctx.metrics.iter().enumerate() {
        run::metric_values(col(batch, name), &mut vals[k]);
        let t = agg.thresholds[k];
        // The worst rows are kept: the highest where lower is better.
        let worst_first = worst_first(name);
        let v = &vals[k];
        for i in 0..n {
            let x = v[i];
            if !x.is_finite() {
                continue;
            }
            agg.cur[k].add(x as f64, t);
            agg.cur_hist[k].add(x as f64);
            let e = (sortable(worst_first * x), first_row + i as u64);
            if agg.lowest[k].wants(&e) {
                agg.lowest[k].offer(e);
            }
            if sliced {
                agg.slices[slice_ids[i] as usize].cur[k].add(x as f64, t);
            }
        }
        let Some(b) = base else { continue };
        let bv = &b.vals[k];
        for i in 0..n {
            let (x, y) = (v[i], bv[i]);
            if x.is_nan() || y.is_nan() {
                continue;
            }
            let flip = agg.paired[k].add(y, x, t);
            if sliced {
                agg.slices[slice_ids[i] as usize].paired[k].add(y, x, t);
            }
            if flip != 0 {
                let d = x - y;
                let row = first_row + i as u64;
                let entry = |key: f32| (sortable(key), row, b.rows[i], x.to_bits(), y.to_bits());
                if flip < 0 {
                    let e = entry(d);
                    if agg.down[k].wants(&e) {
                        agg.down[k].offer(e);
                    }
                } else {
                    let e = entry(-d);
                    if agg.up[k].wants(&e) {
                        agg.up[k].offer(e);
                    }
                }
            }
        }
    }
    if let Some(b) = base {
        for ((&row, &from), &to) in b.rows.iter().zip(&b.status).zip(&status) {
            if row != NO_ROW {
                if aligned {
                    agg.matched += 1;
                }
                *agg.status_changes.entry((from, to)).or_default() += 1;
            }
        }
    }
    agg.vals = vals;
    agg.status = status;
    agg.slice_ids = slice_ids;
    Ok(())
}

fn judge(ctx: &Ctx, agg: &mut Agg, batch: &RecordBatch) {
    let r = ctx.cur;
    for name in &r.judge_cols {
        let (sum, count) = run::sum_u32(col(batch, name));
        let k = refscore_core::schema::JUDGE_USAGE
            .iter()
            .position(|c| c == name)
            .expect("known");
        agg.judge.sums[k] += sum;
        if k == 0 {
            agg.judge.requested += count;
        }
    }
    if r.source_cols.is_empty() {
        return;
    }
    let n = batch.num_rows();
    let mut judged = vec![false; n];
    for name in &r.source_cols {
        let Some(t) = TextColumn::from_array(col(batch, name)) else {
            continue;
        };
        let counts = agg.judge.sources.entry(name.clone()).or_default();
        for (i, flag) in judged.iter_mut().enumerate() {
            if let Some(s) = t.get(i) {
                if refscore_core::schema::source::is_judge(s) {
                    *flag = true;
                }
                match counts.get_mut(s) {
                    Some(c) => *c += 1,
                    None => {
                        counts.insert(s.to_string(), 1);
                    }
                }
            }
        }
    }
    agg.judge.judged += judged.iter().filter(|j| **j).count() as u64;
}
