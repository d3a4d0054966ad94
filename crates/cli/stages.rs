//! The metric stages behind the one [`Stage`] interface the job drives:
//! lexical, embedding and judge, each a thin adapter over its crate.

use arrow::array::{AsArray, Float32Array};
use arrow::datatypes::{Field, Float32Type};
use refscore_batch::{Error, RowBatch, ScoreColumns, Stage};
use refscore_embed::EmbeddingStage;
use refscore_judge::JudgeStage;
use refscore_lexical::Selection;

/// The lexical metrics.
pub struct Lexical(pub Selection);

impl Stage for Lexical {
    fn fields(&self) -> Vec<Field> {
        refscore_lexical::fields(self.0)
    }

    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        Ok(refscore_lexical::score_batch(batch, self.0))
    }
}

/// Cosine and BERTScore.
pub struct Embedding(pub EmbeddingStage);

impl Stage for Embedding {
    fn fields(&self) -> Vec<Field> {
        self.0.fields()
    }

    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        self.0.score_batch(batch)
    }
}

/// The judge metrics, for the rows that ask for them.
pub struct Judge {
    /// The judge stage.
    pub stage: JudgeStage,
    /// `--judge-where`, for messages.
    pub where_column: Option<String>,
}

impl Stage for Judge {
    fn fields(&self) -> Vec<Field> {
        self.stage.fields()
    }

    fn score(&mut self, batch: &RowBatch, earlier: &ScoreColumns) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        let requested: Vec<[bool; 3]> = match &batch.row_filter {
            None => vec![[true; 3]; n],
            Some(col) => {
                let column = self.where_column.as_deref().unwrap_or("");
                (0..n)
                    .map(|i| {
                        refscore_judge::requested_by(col, i, &|| {
                            format!(
                                "{}: column '{column}', row {}",
                                batch.source,
                                batch.first_row_in_source + i as u64
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let cosine: Option<Float32Array> = earlier
            .column("cosine")
            .map(|c| c.as_primitive::<Float32Type>().clone());
        let mut scores = self.stage.score_batch(batch, &requested, cosine.as_ref())?;
        // Rows whose judge endpoint failed (down, timing out, 429, 5xx): a
        // resumed run tries them again. Bad answers would only fail again.
        scores.retryable_rows = self.stage.last_batch_rows_retryable();
        Ok(scores)
    }
}
