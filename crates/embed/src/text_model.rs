//! The one point where embedding models vary: a model turns texts into
//! [`Embedded`] values (ids, a sentence vector, token vectors). The stage
//! around it ([`crate::EmbeddingStage`]) finds distinct texts, caches them,
//! weighs tokens and computes the metrics the same way for every model.

use std::sync::Arc;

use refscore_core::Error;

use crate::math::Embedded;
use crate::tokens::Tokens;
use crate::EmbedReport;

/// A model the embedding metrics read: a transformer run in Candle
/// ([`crate::transformer::TransformerModel`]) or a static table
/// ([`crate::static_model::StaticModel`]).
pub(crate) trait TextModel: Send + Sync {
    /// Tokenises texts as the model reads them, in order, with the bytes
    /// handed to the tokenizer.
    fn tokenize(&self, texts: &[&str]) -> Result<(Vec<Tokens>, u64), Error>;

    /// Embeds the texts `which` (indexes into `tokens` and `out`), filling
    /// `out` and counting the work in `report`.
    fn embed(
        &mut self,
        which: &[usize],
        tokens: Vec<Option<Tokens>>,
        out: &mut [Option<Arc<Embedded>>],
        report: &mut EmbedReport,
    ) -> Result<(), Error>;

    /// Most tokens a scoring batch hands [`TextModel::embed`] at once: the
    /// token vectors held at a time stay bounded by it, and the texts are
    /// sorted by length within it. 64 Ki unless the model says otherwise.
    fn chunk_tokens(&self) -> usize {
        64 * 1024
    }

    /// BERTScore's greedy matching of an output `c` against a reference
    /// `r`: each token's best cosine in the other text.
    fn best_matches(&self, c: &Embedded, r: &Embedded) -> (Vec<f32>, Vec<f32>);

    /// Ids BERTScore gives no weight ([CLS]/[SEP]).
    fn special(&self) -> &[u32];

    /// How many ids there are (the size of IDF's counts).
    fn vocab_size(&self) -> usize;

    /// The layer BERTScore matches (0 = the embeddings, all a static model
    /// has), for the rows of a baseline file.
    fn score_layer(&self) -> usize;

    /// The model's own entries of the summary's `embedding` object.
    fn describe(&self) -> serde_json::Map<String, serde_json::Value>;
}
