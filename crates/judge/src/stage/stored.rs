//! Stored answers: the on-disk cache and the paid-answers journal, keyed by
//! template, request parameters, output mode and texts; and the output mode
//! an endpoint negotiated, recorded so a later run starts in it.

use super::*;

impl JudgeStage {
    /// Starts the client in the output mode an earlier run negotiated with
    /// this endpoint, as recorded in the journal or cache folder.
    pub(super) fn resume_mode(&mut self) {
        let key = mode_key(&self.client);
        for store in self.stores() {
            if let Some(mode) = store
                .get(&key)
                .and_then(|v| v["mode"].as_str().map(String::from))
            {
                self.client.start_in_mode(&mode);
            }
        }
        self.recorded_mode = self.client.mode_name().to_string();
    }

    /// The journal and the cache folder, where present, in that order.
    fn stores(&self) -> impl Iterator<Item = &dyn Store> {
        let journal = self.journal.as_ref().map(|j| j as &dyn Store);
        let disk = self.disk.as_ref().map(|d| d as &dyn Store);
        journal.into_iter().chain(disk)
    }

    /// Records the output mode when it changed during a batch.
    pub(super) fn record_mode(&mut self) {
        let mode = self.client.mode_name();
        if mode == self.recorded_mode {
            return;
        }
        let key = mode_key(&self.client);
        for store in self.stores() {
            store.put(&key, &json!({ "mode": mode }));
        }
        self.recorded_mode = mode.to_string();
    }

    /// The hash of a rubric's question for a row (its rendered user
    /// message), with what else decides the stored answer: with `failures`,
    /// whether a reason was asked depends on the metric's pass threshold.
    pub(crate) fn ask_texts(&self, r: &Rubric, user: &str) -> String {
        match self.options.reasons {
            Reasons::Always => DiskCache::key(&[user]),
            Reasons::Never => DiskCache::key(&[user, "never"]),
            Reasons::Failures => {
                let pass = match r.answer {
                    Answer::Verdict => self.p_threshold(r),
                    Answer::Score { .. } => self.score_pass(r),
                };
                DiskCache::key(&[user, "failures", &pass.to_string()])
            }
        }
    }

    /// The cache and journal key of a request: the template and every other
    /// request parameter that can change the answer (URL, model, token
    /// limit, temperature, output mode), and the hash of its texts.
    pub(super) fn key(&self, template: &Template, mode: &str, texts: &str) -> String {
        DiskCache::key(&[&self.client.request_id(template, mode), texts])
    }

    /// The output mode a request to `template` is sent in now.
    pub(super) fn mode_for(&self, template: &Template) -> &'static str {
        if template.structured {
            self.client.mode_name()
        } else {
            NO_FORMAT
        }
    }

    /// A stored answer for a request in the current output mode: from the
    /// journal first (a paid answer replayed with its usage, source
    /// `judge`), else from the cache (source `cache`, no usage).
    pub(crate) fn lookup(
        &self,
        template: &Template,
        texts: &str,
    ) -> Option<(Value, Usage, Source)> {
        let key = self.key(template, self.mode_for(template), texts);
        if let Some(entry) = self.journal.as_ref().and_then(|j| j.get(&key)) {
            let u = |k: &str| {
                entry["usage"][k]
                    .as_u64()
                    .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX))
            };
            if entry.get("answer").is_some() {
                let usage = Usage {
                    prompt_tokens: u("prompt_tokens"),
                    completion_tokens: u("completion_tokens"),
                    cached_tokens: u("cached_tokens"),
                    latency_ms: u("latency_ms"),
                };
                return Some((entry["answer"].clone(), usage, Source::Judge));
            }
        }
        let v = self.disk.as_ref().and_then(|d| d.get(&key))?;
        Some((v, Usage::default(), Source::Cache))
    }

    /// Counts an answer replayed from the journal like the call it stands for.
    pub(crate) fn count_replay(&mut self, usage: Usage) {
        self.report.replayed += 1;
        self.replayed_tokens.0 += u64::from(usage.prompt_tokens);
        self.replayed_tokens.1 += u64::from(usage.completion_tokens);
        self.replayed_tokens.2 += u64::from(usage.cached_tokens);
    }

    /// Stores a judge answer in the cache and, with its usage, the journal,
    /// under the key of the output mode that produced it.
    pub(super) fn record(
        &self,
        template: &Template,
        mode: &str,
        texts: &str,
        v: &Value,
        usage: Usage,
    ) {
        let key = self.key(template, mode, texts);
        if let Some(d) = &self.disk {
            d.put(&key, v);
        }
        if let Some(j) = &self.journal {
            j.put(
                &key,
                &json!({"answer": v, "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "cached_tokens": usage.cached_tokens,
                    "latency_ms": usage.latency_ms,
                }}),
            );
        }
    }
}

/// The key under which the cache and journal folders record the output mode
/// an endpoint negotiated, so a later run starts in it and finds its answers.
pub(super) fn mode_key(client: &Client) -> String {
    DiskCache::key(&["negotiated output mode", client.shown_url(), client.model()])
}
