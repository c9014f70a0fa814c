//! A meter source whose readings go out as step records (`crate::steps`): the source reads
//! at its own interval, the reducer passes on one record per meter per step.
//!
//! The reducer's state is spooled with the source's own, in the same entry as the records it
//! produced, so after a restart (or a SIGKILL) it resumes exactly where the spool does: no
//! boundary is sent twice, and the counter carried across resets continues.

use crate::records::Batch;
use crate::sources::{saved, BoxFuture, Collected, Source, SourceError, StateError};
use crate::steps::Reducer;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub struct Stepped {
    inner: Box<dyn Source>,
    reducer: Reducer,
}

/// The spooled state: the source's own under a key no source uses, so a state spooled before
/// steps existed is recognised and handed to the source as it was.
#[derive(Serialize, Deserialize)]
struct Saved {
    stepped_v1: Inner,
}

#[derive(Serialize, Deserialize)]
struct Inner {
    source: Option<serde_json::Value>,
    reducer: Reducer,
}

impl Stepped {
    /// Steps of `step_s`; a boundary is interpolated between readings at most five of the
    /// source's intervals (and at least a step) apart.
    pub fn new(inner: Box<dyn Source>, step_s: u32, interval: Duration) -> Self {
        let step_ms = i64::from(step_s) * 1000;
        let interval_ms = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX / 8);
        Stepped {
            reducer: Reducer::new(step_ms, (interval_ms * 5).max(step_ms)),
            inner,
        }
    }
}

impl Source for Stepped {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        // A state without the stepped key was spooled before steps existed: the source's own.
        if state.get("stepped_v1").is_none() {
            return self.inner.restore(state);
        }
        let saved: Saved = saved(state)?;
        self.reducer.restore(saved.stepped_v1.reducer);
        match saved.stepped_v1.source {
            Some(s) => self.inner.restore(s),
            None => Ok(()),
        }
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let c = self.inner.collect(now).await?;
            let batches: Vec<Batch> = c
                .batches
                .into_iter()
                .map(|b| match b {
                    Batch::Samples(readings) => Batch::Samples(self.reducer.push(readings)),
                    other => other,
                })
                .collect();
            let state = serde_json::to_value(Saved {
                stepped_v1: Inner {
                    source: c.state,
                    reducer: self.reducer.clone(),
                },
            })
            .ok();
            Ok(Collected::new(batches, state))
        })
    }
}
