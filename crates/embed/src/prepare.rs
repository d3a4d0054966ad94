//! The passes some embedding settings need before scoring: IDF weights
//! over the input's references (`--idf`), and BERTScore's rescaling
//! baseline (`--rescale-baseline`): given, read from a bert_score file, or
//! fitted on mismatched pairs of the input's rows.

use std::path::PathBuf;

use refscore_core::{Error, FitInput, TextColumn};

use crate::{read_baseline, EmbeddingStage};

/// How BERTScore is rescaled.
#[derive(Debug, Clone, PartialEq)]
pub enum Rescale {
    /// Baselines given by the user.
    Given([f32; 3]),
    /// Baselines from random mismatched pairs of the input.
    Auto,
    /// A bert_score baseline file, read at the row of the layer in use.
    File(PathBuf),
}

/// How many mismatched pairs of the input `--rescale-baseline auto`
/// averages.
const BASELINE_PAIRS: usize = 1000;

impl EmbeddingStage {
    /// [`EmbeddingStage::prepare`] on `input`: the passes over it that the
    /// options ask for ([`refscore_core::Stage::fit`]).
    pub fn fit_to(&mut self, input: &dyn FitInput) -> Result<(), Error> {
        self.prepare(
            input.name(),
            || input.references(),
            || input.mismatched_pairs(BASELINE_PAIRS),
        )
    }

    /// Runs the passes the stage's options ask for before scoring.
    /// `references` and `pairs` read the input only when a pass needs it;
    /// `input` names the input in messages.
    pub fn prepare<R>(
        &mut self,
        input: &str,
        references: impl FnOnce() -> Result<R, Error>,
        pairs: impl FnOnce() -> Result<Vec<(String, String)>, Error>,
    ) -> Result<(), Error>
    where
        R: Iterator<Item = Result<TextColumn, Error>>,
    {
        if self.options.idf {
            self.fit_idf(references()?)?;
        }
        match self.options.rescale.clone() {
            Some(Rescale::Given(b)) => self.set_baseline(b, "given"),
            Some(Rescale::File(path)) => {
                let b = read_baseline(&path, self.score_layer())?;
                self.set_baseline(b, &path.display().to_string());
            }
            Some(Rescale::Auto) => {
                let pairs = pairs()?;
                if pairs.len() < 2 {
                    return Err(Error::bad_input(format!(
                        "{input}: --rescale-baseline auto needs at least 2 scorable rows with different texts"
                    )));
                }
                let b = self.fit_baseline(&pairs)?;
                self.set_baseline(b, "auto");
            }
            None => {}
        }
        Ok(())
    }
}
