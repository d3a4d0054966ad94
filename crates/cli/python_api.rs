//! The same scoring without the command line around it, for the Python
//! package: [`Scorer`] scores record batches held in memory with the stages
//! a `score` run would build, and [`score_parquet`] runs a whole `score` job.
//! Both take their options as `score` flags, parsed by the CLI's own parser,
//! so names, defaults, checks and messages are the CLI's.

use std::path::Path;

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema, SchemaRef};
use refscore_core::{Error, RowBatch};
use refscore_read::Layout;
use refscore_write::{result_record, result_schema};

use crate::pipeline::{read_options, Pipeline, Stages};
use crate::score::{self, Outcome};
use crate::settings::Settings;

/// How in-memory data is named in messages, where a run over files names
/// the file.
pub const DATA_NAME: &str = "data";

/// Parses `score` flags (everything after `refscore score`) into settings,
/// through the parser the command line uses: a flag it would refuse is a
/// usage error (exit 64) with clap's first line as the message.
fn parse(flags: &[String]) -> Result<Settings, Error> {
    let words: Vec<std::ffi::OsString> = flags.iter().map(Into::into).collect();
    Settings::from_words(&words)
}

/// Sizes this process's worker threads (`--threads`): the thread pool can be
/// built once per process, so a later, different size is refused.
pub(crate) fn set_threads(threads: Option<usize>) -> Result<(), Error> {
    let Some(n) = threads else {
        return Ok(());
    };
    // The global pool is the only one: refscore's own products split their
    // work by its size, and Candle's (gemm's) run their chunks on it too, so
    // no environment variable needs setting (which a library reached from
    // Ray's threads must not do).
    match rayon::ThreadPoolBuilder::new().num_threads(n).build_global() {
        Ok(()) => Ok(()),
        Err(_) if rayon::current_num_threads() == n => Ok(()),
        Err(e) => Err(Error::config(format!(
            "--threads {n}: {e} (this process already has {} worker threads; they are sized once per process)",
            rayon::current_num_threads()
        ))),
    }
}

/// Runs a whole `score` job (the flags hold the input and `-o OUTPUT`, as on
/// the command line) and returns the summary as JSON text. A `--resume` of a
/// finished output returns the summary written then.
pub fn score_parquet(flags: &[String]) -> Result<String, Error> {
    let settings = parse(flags)?;
    set_threads(settings.threads)?;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| score::run(&settings)));
    match caught.map_err(panic_error)?? {
        Outcome::Scored { summary, .. } => {
            Ok(serde_json::to_string(&summary).expect("summary serialises"))
        }
        Outcome::AlreadyPublished { summary, .. } => Ok(summary),
        Outcome::Published {
            summary: Some(summary),
            ..
        } => Ok(summary),
        Outcome::Published {
            summary_at: path, ..
        } => std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("{}: cannot read: {e}", path.display()))),
        Outcome::AlreadyComplete => {
            let path = refscore_write::summary_path(&settings.output);
            std::fs::read_to_string(&path)
                .map_err(|e| Error::io(format!("{}: cannot read: {e}", path.display())))
        }
    }
}

fn panic_error(panic: Box<dyn std::any::Any + Send>) -> Error {
    let what = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a panic");
    Error::internal(format!("internal error: {what}"))
}

/// `score` flags for in-memory data: the input is a placeholder name and
/// there is no output file.
fn parse_in_memory(flags: &[String]) -> Result<Settings, Error> {
    if flags
        .iter()
        .any(|f| f == "--output-format" || f.starts_with("--output-format="))
    {
        return Err(Error::usage(
            "output_format: applies to jobs over files (score_parquet), not to in-memory data \
             (Scorer, refscore.ray.score, refscore.spark.score), which returns the rows to you",
        ));
    }
    let argv: Vec<String> = [DATA_NAME, "-o", "-"]
        .into_iter()
        .map(String::from)
        .chain(flags.iter().cloned())
        .collect();
    parse(&argv)
}

/// What a scorer with these `score` flags would do with data of `schema`,
/// found without loading anything, for a driver that hands the data out to
/// workers (Ray, Spark) and must refuse a bad option before any starts.
pub struct Plan {
    /// Rows per batch (`--batch-size`).
    pub batch_size: usize,
    /// The id column, when the data has one.
    pub id_column: Option<String>,
    /// The result's columns and types: the CLI's for the same input.
    pub result_schema: SchemaRef,
    /// Whether the run asks a judge: a worker run twice would pay twice.
    pub judged: bool,
    /// The judge's budgets per minute (requests, tokens), however given
    /// (flag or config file), which a driver splits across its workers.
    pub judge_budget: (Option<u32>, Option<u32>),
}

/// Checks every option and the column mapping against `schema` (with the
/// CLI's messages) and returns the [`Plan`]. `partitioned`: each worker will
/// see only its part of the data, so options whose figures come from a pass
/// over the whole input (`--idf`, `--rescale-baseline auto`) are refused
/// (exit 78): fitted per part they would differ from the CLI's, silently.
pub fn plan(flags: &[String], schema: &Schema, partitioned: bool) -> Result<Plan, Error> {
    let settings = parse_in_memory(flags)?;
    let layout = Layout::new(schema, &read_options(&settings), Path::new(DATA_NAME))?;
    let pipeline = Pipeline::plan(&settings)?;
    if partitioned {
        if let Some(name) = pipeline.fitted_on_whole_input() {
            return Err(Error::config(format!(
                "{name}: fitted on the whole input, which no worker sees when the data is split \
                 across workers; run the job over files (each shard fits it on the whole input, as the CLI does), \
                 or give the figures (a baseline file, no idf)"
            )));
        }
    }
    let layout = layout.plain_strings();
    Ok(Plan {
        batch_size: settings.batch_size,
        id_column: layout.columns().id.clone(),
        result_schema: schema_for(&layout, &pipeline.metric_fields())?,
        judged: pipeline.endpoint().is_some(),
        judge_budget: settings
            .judge
            .as_ref()
            .map_or((None, None), |j| (j.rpm, j.tpm)),
    })
}

/// The result's schema for data laid out as `layout`: the CLI's columns
/// and types, for the plan and the scorer alike.
fn schema_for(layout: &Layout, metric_fields: &[Field]) -> Result<SchemaRef, Error> {
    result_schema(layout.id_field(), metric_fields, layout.keep_fields())
}

/// The metric stages of a `score` run, loaded once (the model, the judge
/// client) and used for any number of in-memory datasets.
pub struct Scorer {
    settings: Settings,
    /// The metric columns of the result, in order.
    metric_fields: Vec<Field>,
    stages: Stages,
}

impl Scorer {
    /// Builds the stages from `score` flags (no input or output: the data
    /// comes with each call). Options that only make sense for a job over
    /// files (`--resume`, `--shard`) are refused.
    pub fn new(flags: &[String]) -> Result<Scorer, Error> {
        let settings = parse_in_memory(flags)?;
        if settings.resume || settings.shard.is_some() {
            return Err(Error::usage(
                "resume and shard apply to jobs over files (score_parquet), not to Scorer",
            ));
        }
        if settings.judge.as_ref().is_some_and(|j| j.batch.is_some()) {
            return Err(Error::usage(
                "judge batches wait for hours and resume: they apply to jobs over files (score_parquet), not to Scorer",
            ));
        }
        set_threads(settings.threads)?;
        let pipeline = Pipeline::plan(&settings)?;
        // Fails loudly before any work when the judge cannot answer.
        let judge = pipeline.online_judge()?;
        let stages = Stages {
            loaded: pipeline.load()?,
            judge,
        };
        let metric_fields = pipeline.metric_fields();
        Ok(Scorer {
            settings,
            metric_fields,
            stages,
        })
    }

    /// Scores `batches` (all of `schema`) as one input: the same column
    /// mapping, checks, batches of `--batch-size` rows, stages and result
    /// rows as a `score` run over a file holding these rows. Without an id
    /// column the id is the row ordinal within this call.
    pub fn score(
        &mut self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<(SchemaRef, Vec<RecordBatch>), Error> {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.score_inner(schema, batches)
        }));
        caught.map_err(panic_error)?
    }

    fn score_inner(
        &mut self,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<(SchemaRef, Vec<RecordBatch>), Error> {
        let source = Path::new(DATA_NAME);
        let layout = Layout::new(schema, &read_options(&self.settings), source)?.plain_strings();
        let out_schema = schema_for(&layout, &self.metric_fields)?;
        // Only the columns the run reads, cut into the CLI's batches.
        let needed: Vec<usize> = layout
            .needed_columns()
            .iter()
            .map(|n| schema.index_of(n).expect("checked by the layout"))
            .collect();
        let projected: Vec<RecordBatch> = batches
            .iter()
            .map(|b| b.project(&needed))
            .collect::<Result<_, _>>()
            .map_err(|e| Error::bad_input(format!("{DATA_NAME}: {e}")))?;
        let projected_schema = Schema::new(
            needed
                .iter()
                .map(|&i| schema.field(i).clone())
                .collect::<Vec<_>>(),
        );
        let all = arrow::compute::concat_batches(&SchemaRef::new(projected_schema), &projected)
            .map_err(|e| Error::bad_input(format!("{DATA_NAME}: {e}")))?;
        let size = self.settings.batch_size.max(1);
        let mut rows: Vec<RowBatch> = Vec::with_capacity(all.num_rows().div_ceil(size));
        let mut at = 0;
        while at < all.num_rows() {
            let n = size.min(all.num_rows() - at);
            let slice = all.slice(at, n);
            rows.push(layout.row_batch(&slice, source, at as u64, at as u64)?);
            at += n;
        }
        if let (Some(_), Some(column)) = (&self.stages.judge, &self.settings.judge_where) {
            for b in &rows {
                if let Some(filter) = &b.row_filter {
                    score::check_row_filter(
                        filter,
                        DATA_NAME,
                        b.first_row_in_source,
                        column,
                        &self.settings.judge_metrics,
                    )?;
                }
            }
        }
        self.stages.fit(&refscore_job::fit::RowsFit {
            name: DATA_NAME,
            rows: &rows,
        })?;
        let mut chain = self.stages.chain();
        let mut out = Vec::with_capacity(rows.len());
        for b in &rows {
            let scores = refscore_core::score_stages(&mut chain, b)?;
            out.push(result_record(&out_schema, b, scores)?);
        }
        Ok((out_schema, out))
    }
}
