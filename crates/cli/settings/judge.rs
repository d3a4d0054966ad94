//! The judge's settings as the CLI reads them: the options, their checks
//! and the resolved settings are the judge crate's
//! ([`refscore_judge::options`]); the API key is read here, where
//! refscore reads the environment.

use refscore_judge::options::JudgeSettings;
use refscore_judge::Api;

use super::env_text;

/// The API key, from the variable `--judge-api-key-env` names (none when
/// unset or blank). Read when the endpoint is built, never stored in the
/// settings, so no printout of them can show it.
pub(crate) fn api_key(judge: &JudgeSettings) -> Option<String> {
    env_text(&judge.api_key_env)
}

/// The API key sent when `--overwrite` cancels a discarded run's batches
/// at a server other than this run's judge: the default API's variable's.
pub(super) fn default_api_key() -> Option<String> {
    env_text(Api::default().key_env())
}
