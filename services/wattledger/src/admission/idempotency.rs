//! Questions asked again under the same `Idempotency-Key` (the IETF httpapi draft's header):
//! a scheduler that crashed between an answer and its own record of it asks again, and gets
//! the decision already taken instead of a second reservation.
//!
//! A key belongs to the tenant the question names. The same key with the same question is
//! answered with the stored answer; with another question it is refused (the key was reused
//! for something else); while the first is being decided on this replica, a second is told to
//! wait (409). Decisions are stored off the request path, so this replica remembers the
//! answers it gave under a key for [`REMEMBERED`] (a retry usually comes back within
//! seconds, before the writer has stored the first); past that, and on other replicas, the
//! stored decision answers. Two replicas asked the same new key at the same instant may both
//! decide: the database keeps the first stored (one decision per tenant and key), and the
//! other's reservation is counted only until the next full rebuild of the state.

use super::{Admission, Answered, Ask, AskError};
use chrono::{DateTime, Utc};
use parking_lot::Mutex;
use sqlx::PgPool;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};
use wattledger_store::admission as store;
use wattledger_store::StoreError;

/// The longest key taken (the column's bound).
pub const MAX_KEY_LEN: usize = 255;
/// How long this replica remembers an answer it gave under a key.
pub const REMEMBERED: Duration = Duration::from_secs(600);
/// The most keys remembered at once; the oldest go first past it (the stored decision still
/// answers for them).
const MAX_REMEMBERED: usize = 100_000;

/// A key as the header carries it: 1 to 255 visible ASCII characters, else why not.
pub fn check_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!("must be 1 to {MAX_KEY_LEN} characters"));
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("must be visible ASCII characters (no spaces or control characters)".into());
    }
    Ok(())
}

/// What this replica knows of a key when a question comes with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// Not seen here: the caller decides (or finds the stored decision), then calls
    /// [`Recent::finish`] or [`Recent::abandon`].
    Fresh,
    /// Answered here for the same question: this answer's JSON.
    Replay(String),
    /// Answered here for another question.
    Reused,
    /// Being decided here right now.
    InFlight,
}

#[derive(Debug)]
enum Entry {
    InFlight,
    Answered { request: String, answer: String },
}

type Key = (String, String);

/// The keys this replica answered lately.
#[derive(Debug, Default)]
pub struct Recent {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Each key with when it was begun.
    entries: HashMap<Key, (Instant, Entry)>,
    /// When each key was begun, oldest first, for expiry.
    order: VecDeque<(Instant, Key)>,
}

impl Recent {
    /// Looks `key` up for `tenant`'s question `request` (its JSON), and marks it in flight
    /// when it is fresh.
    pub fn begin(&self, tenant: &str, key: &str, request: &str, now: Instant) -> Begun {
        let mut inner = self.inner.lock();
        inner.expire(now);
        let k = (tenant.to_owned(), key.to_owned());
        match inner.entries.get(&k).map(|(_, e)| e) {
            Some(Entry::InFlight) => Begun::InFlight,
            Some(Entry::Answered { request: r, answer }) if r == request => {
                Begun::Replay(answer.clone())
            }
            Some(Entry::Answered { .. }) => Begun::Reused,
            None => {
                inner.entries.insert(k.clone(), (now, Entry::InFlight));
                inner.order.push_back((now, k));
                Begun::Fresh
            }
        }
    }

    /// The key was answered (decided now, or found stored).
    pub fn finish(&self, tenant: &str, key: &str, request: String, answer: String) {
        let mut inner = self.inner.lock();
        let k = (tenant.to_owned(), key.to_owned());
        // Expired meanwhile (a decision that took ten minutes): nothing to keep it in order.
        if let Some((_, e)) = inner.entries.get_mut(&k) {
            *e = Entry::Answered { request, answer };
        }
    }

    /// Nothing was decided under the key (the question was refused, the database failed).
    pub fn abandon(&self, tenant: &str, key: &str) {
        let mut inner = self.inner.lock();
        let k = (tenant.to_owned(), key.to_owned());
        if matches!(inner.entries.get(&k), Some((_, Entry::InFlight))) {
            inner.entries.remove(&k);
        }
    }
}

impl Inner {
    fn expire(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            let old = now.duration_since(*at) >= REMEMBERED;
            if !old && self.order.len() < MAX_REMEMBERED {
                break;
            }
            let (at, k) = self.order.pop_front().expect("a front");
            // A key abandoned and begun again has a later place in the order: it stays.
            if self.entries.get(&k).is_some_and(|(begun, _)| *begun == at) {
                self.entries.remove(&k);
            }
        }
    }
}

/// How a question was answered.
#[derive(Debug)]
pub enum Once {
    /// Decided now (boxed: an answer is large, a replay is its JSON alone).
    Decided(Box<Answered>),
    /// Asked before under its key: the answer then, as JSON.
    Replayed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum OnceError {
    #[error(transparent)]
    Ask(#[from] AskError),
    #[error("this Idempotency-Key was used for another question of this tenant")]
    Reused,
    #[error("a question with this Idempotency-Key is being decided; ask again in a moment")]
    InFlight,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Admission {
    /// Asks once per key: a question with `key` that was answered before (here lately, or
    /// stored by any replica) gets that answer; a new one is decided and stored under the
    /// key. Without a key, or for a dry run (which keeps nothing), as `ask_maybe_dry`.
    pub async fn ask_once(
        &self,
        pool: &PgPool,
        ask: &Ask,
        source: &str,
        now: DateTime<Utc>,
        dry_run: bool,
        key: Option<&str>,
    ) -> Result<Once, OnceError> {
        let dry_run = dry_run || ask.dry_run;
        let Some(key) = key.filter(|_| !dry_run) else {
            return Ok(Once::Decided(Box::new(
                self.ask_maybe_dry(ask, source, now, dry_run)?,
            )));
        };
        let request = serde_json::to_string(ask).unwrap_or_default();
        match self
            .recent
            .begin(&ask.tenant, key, &request, Instant::now())
        {
            Begun::Replay(answer) => return Ok(Once::Replayed(answer)),
            Begun::Reused => return Err(OnceError::Reused),
            Begun::InFlight => return Err(OnceError::InFlight),
            Begun::Fresh => {}
        }
        let once = self
            .stored_or_decided(pool, ask, source, now, key, &request)
            .await;
        match &once {
            Ok(Once::Decided(a)) => self
                .recent
                .finish(&ask.tenant, key, request, a.json.clone()),
            Ok(Once::Replayed(answer)) => {
                self.recent
                    .finish(&ask.tenant, key, request, answer.clone())
            }
            Err(_) => self.recent.abandon(&ask.tenant, key),
        }
        once
    }

    async fn stored_or_decided(
        &self,
        pool: &PgPool,
        ask: &Ask,
        source: &str,
        now: DateTime<Utc>,
        key: &str,
        request: &str,
    ) -> Result<Once, OnceError> {
        // A question its own rules refuse was never stored (and its text may be none the
        // database can hold, a NUL): it goes to the decision, which refuses it naming every
        // field.
        if super::validate(ask, now).is_empty() {
            match store::decision_by_key(pool, &ask.tenant, key, request).await? {
                Some((answer, true)) => return Ok(Once::Replayed(answer)),
                Some((_, false)) => return Err(OnceError::Reused),
                None => {}
            }
        }
        let answered = self.ask_keyed(ask, source, now, false, Some(key))?;
        Ok(Once::Decided(Box::new(answered)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_fresh_then_in_flight_then_replayed_for_the_same_question_only() {
        let r = Recent::default();
        let t0 = Instant::now();
        assert_eq!(r.begin("a", "k1", "{q}", t0), Begun::Fresh);
        assert_eq!(r.begin("a", "k1", "{q}", t0), Begun::InFlight);
        // Keys are the tenant's: another tenant's k1 is another key.
        assert_eq!(r.begin("b", "k1", "{q}", t0), Begun::Fresh);
        r.finish("a", "k1", "{q}".into(), "{answer}".into());
        assert_eq!(
            r.begin("a", "k1", "{q}", t0),
            Begun::Replay("{answer}".into())
        );
        assert_eq!(r.begin("a", "k1", "{other}", t0), Begun::Reused);
    }

    #[test]
    fn an_abandoned_key_is_fresh_again_and_an_answer_is_forgotten_after_ten_minutes() {
        let r = Recent::default();
        let t0 = Instant::now();
        assert_eq!(r.begin("a", "k", "{q}", t0), Begun::Fresh);
        r.abandon("a", "k");
        assert_eq!(r.begin("a", "k", "{q}", t0), Begun::Fresh);
        r.finish("a", "k", "{q}".into(), "{answer}".into());
        let later = t0 + REMEMBERED - Duration::from_secs(1);
        assert_eq!(
            r.begin("a", "k", "{q}", later),
            Begun::Replay("{answer}".into())
        );
        // Past it, the stored decision answers (the caller looks it up).
        assert_eq!(r.begin("a", "k", "{q}", t0 + REMEMBERED), Begun::Fresh);
    }

    #[test]
    fn keys_are_visible_ascii_of_bounded_length() {
        assert!(check_key("wl-7f3a/check/first").is_ok());
        assert!(check_key(&"x".repeat(MAX_KEY_LEN)).is_ok());
        for bad in ["", "a b", "a\u{0}b", "é", &"x".repeat(MAX_KEY_LEN + 1)] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }
}
