//! Judge modes: ways of asking an API that change how each request is
//! sent, not what it asks (OpenAI's flex processing). A mode is one module
//! of `protocol/` holding all of it: its option group (a clap `Args`,
//! flattened into the judge's options, so its flags, its config keys and
//! its Python keywords come from that one definition), its check against
//! the run (the API, batches, retries), how it shapes each attempt at a
//! request and which refusals it counts, and its summary entry and line.
//! [`judge_modes!`] in `protocol/mod.rs` lists them, one line each.

use std::sync::Arc;

use refscore_core::{Error, Given};
use serde_json::{Map, Value};

use crate::batch::BatchMode;
use crate::protocol::Api;

/// What a mode's options are checked against: the run's judge as resolved
/// so far, and where each value was given.
pub struct ModeContext<'a> {
    /// The API the judge speaks.
    pub api: Api,
    /// `--judge-batch`, when the run sends batches instead of calls.
    pub batch: Option<&'a BatchMode>,
    /// `--judge-retries` (or its default): attempts after the first.
    pub retries: u32,
    /// Where each option's value came from (a flag is 64, a config line 78).
    pub given: &'a dyn Given,
}

/// A mode's option group: what its flags ask for, checked against the run.
#[allow(dead_code)] // used by the modes `judge_modes!` lists
pub(crate) trait ModeOptions {
    /// The mode these options ask for, checked; `None` when they ask for
    /// none.
    fn resolve(&self, run: &ModeContext) -> Result<Option<Mode>, Error>;

    /// The mode's line of the printed summary, from the summary's judge
    /// section; `None` when the run did not use it.
    fn line(judge: &Value) -> Option<String>
    where
        Self: Sized;
}

/// A judge mode as a run uses it: each judge's endpoint holds it, and
/// each judge client starts its own [`RequestMode`] (its own counts).
pub(crate) trait ModeKind: Send + Sync {
    /// Its name: the key of its entry in the summary's judge section.
    fn name(&self) -> &'static str;
    /// The per-request timeout, in seconds, where `--judge-timeout` is not
    /// given.
    fn timeout(&self) -> Option<f64> {
        None
    }
    /// A judge client's use of it.
    fn start(&self) -> Arc<dyn RequestMode>;
}

/// One judge client's use of a mode: it shapes every attempt at a request
/// and counts the refusals it recognises (retried with backoff, as any
/// 429 or 5xx is).
pub(crate) trait RequestMode: Send + Sync {
    /// Its name (see [`ModeKind::name`]).
    fn name(&self) -> &'static str;
    /// Adds the mode's fields to the body of an attempt at a request that
    /// the mode has refused `refused` times so far.
    fn shape(&self, body: &mut Value, refused: u32);
    /// Whether an HTTP error status `code` with reply `text` is the mode
    /// refusing the request (no capacity now), rather than any other
    /// failure.
    fn refuses(&self, code: u16, text: &str) -> bool;
    /// Counts a refusal: the `refused`-th of one request, `retried` when
    /// another attempt follows it.
    fn count_refusal(&self, refused: u32, retried: bool);
    /// Its entry in the summary's judge section: counts that a panel's
    /// judges add up.
    fn summary(&self) -> Value;
}

/// A judge mode chosen for a run (see [`ModeKind`]).
#[derive(Clone)]
pub struct Mode(pub(crate) Arc<dyn ModeKind>);

impl Mode {
    /// Its name, as its summary entry is keyed.
    pub fn name(&self) -> &'static str {
        self.0.name()
    }

    /// The per-request timeout, in seconds, the mode wants where
    /// `--judge-timeout` is not given.
    pub fn timeout(&self) -> Option<f64> {
        self.0.timeout()
    }

    /// A judge client's use of it.
    pub(crate) fn start(&self) -> Arc<dyn RequestMode> {
        self.0.start()
    }
}

impl std::fmt::Debug for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Mode").field(&self.name()).finish()
    }
}

/// The mode a run's options ask for, out of every mode's (at most one).
pub(crate) fn chosen(asked: Vec<Mode>) -> Result<Option<Mode>, Error> {
    match asked.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.clone())),
        many => Err(Error::usage(format!(
            "judge modes {}: choose one",
            many.iter()
                .map(Mode::name)
                .collect::<Vec<_>>()
                .join(" and ")
        ))),
    }
}

/// Adds the counts of `other` into `total` (a panel's judges' mode
/// entries): numbers are summed, anything else kept from `total`.
pub(crate) fn add_counts(total: &mut Map<String, Value>, other: &Map<String, Value>) {
    for (key, theirs) in other {
        match (total.get_mut(key), theirs) {
            (None, _) => {
                total.insert(key.clone(), theirs.clone());
            }
            (Some(Value::Object(mine)), Value::Object(theirs)) => add_counts(mine, theirs),
            (Some(mine), Value::Number(n)) if mine.is_u64() && n.is_u64() => {
                *mine = Value::from(mine.as_u64().unwrap_or(0) + n.as_u64().unwrap_or(0));
            }
            _ => {}
        }
    }
}

/// Declares the judge modes: for each `module::Options`, the module (a
/// file of `protocol/`), its option group flattened into [`ModeArgs`],
/// and its summary line. One line per mode.
macro_rules! judge_modes {
    ($($module:ident :: $options:ident),* $(,)?) => {
        $(mod $module;)*

        /// The option groups of every judge mode, flattened into the
        /// judge's options.
        #[derive(Debug, Clone, Default, clap::Args)]
        pub struct ModeArgs {
            $(
                #[command(flatten)]
                $module: $module::$options,
            )*
        }

        impl ModeArgs {
            /// The mode the options ask for (at most one), checked
            /// against the run.
            #[allow(unused_variables)]
            pub fn resolve(
                &self,
                run: &mode::ModeContext,
            ) -> Result<Option<mode::Mode>, refscore_core::Error> {
                #[allow(unused_mut)]
                let mut asked: Vec<mode::Mode> = Vec::new();
                $(asked.extend(mode::ModeOptions::resolve(&self.$module, run)?);)*
                mode::chosen(asked)
            }
        }

        /// Every mode's line of the printed summary, from its judge
        /// section.
        pub(crate) fn mode_lines(_judge: &serde_json::Value) -> Vec<String> {
            #[allow(unused_mut)]
            let mut lines: Vec<String> = Vec::new();
            $(lines.extend(<$module::$options as mode::ModeOptions>::line(_judge));)*
            lines
        }
    };
}
