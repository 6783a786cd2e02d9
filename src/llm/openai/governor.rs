//! One pace for every request this process sends to an endpoint.
//!
//! Each request used to wait out its own 429: a `Retry-After` held back the
//! request that got it while forty other agents kept asking. Every client
//! of the same endpoint and key now shares one `Governor`, which starts a
//! request only when the endpoint's limits, as far as troupe knows them,
//! leave room for it:
//! - a `Retry-After` on a 429 or 503 pauses every request until then;
//! - the `x-ratelimit-*` headers of each answer are a budget, spent before
//!   a 429 can happen;
//! - after a 429, the requests in flight are halved, and grow by one each
//!   second without another;
//! - the user's own caps space the requests out.
//!
//! Until the endpoint has answered once, one request goes at a time, for
//! two seconds at most: its limits are learnt before a fan-out spends
//! them. In a planned run the planner's request is that one, and costs
//! nothing; a slow first answer holds the others back no longer.
//!
//! The other troupe processes of the workspace (background agents, other
//! runs) learn of a `Retry-After` through a file in its results directory
//! (`share_pauses_in`): the one piece of pace worth sharing without a
//! daemon. Any process there may write it, so what it says is bounded by
//! the longest wait troupe accepts anyway.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::limits::{RateHeaders, Reported};
use crate::fsutil::Durability;
use crate::llm::{Delay, DelayObserver, LlmError, Waiting};

/// The user's own bounds on an endpoint (`--max-requests-per-minute`,
/// `--max-tokens-per-minute`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateCaps {
    pub requests_per_minute: Option<u32>,
    pub tokens_per_minute: Option<u32>,
}

/// The longest troupe waits for an endpoint's limit to reset; an endpoint
/// spent for longer (a daily limit) fails the request with its reason
/// rather than hang the run.
pub const LONGEST_WAIT: Duration = super::retry::MAX_RETRY_AFTER;

/// The most a shared pause file holds: milliseconds since 1970, and room.
const PAUSE_FILE_MOST: u64 = 32;

/// How long the first request goes alone before the others go anyway.
const FIRST_ALONE: Duration = Duration::from_secs(2);

pub struct Governor {
    state: Mutex<State>,
    changed: Notify,
    /// The pause this endpoint asked for, shared with the workspace's
    /// other troupe processes, when there is a workspace.
    shared: Option<PathBuf>,
}

/// Where the governors made from now on share their pauses: a results
/// directory, set once by the command that opened the workspace.
static SHARED_IN: OnceLock<PathBuf> = OnceLock::new();

pub fn share_pauses_in(results: &Path) {
    let _ = SHARED_IN.set(results.join(".pace"));
}

/// A request the governor let start; dropping it ends it.
pub struct Permit<'g> {
    governor: &'g Governor,
    /// The tokens it was charged before its answer said how many it used.
    charged: u64,
}

/// What one answer of the endpoint said, for the governor.
pub struct Answer<'a> {
    pub status: u16,
    pub headers: &'a RateHeaders,
    pub retry_after: Option<Duration>,
    /// Tokens the answer used, where it said.
    pub tokens: Option<u64>,
}

impl Answer<'_> {
    /// The pause it asks of every request: a 429's or 503's `Retry-After`.
    fn pause(&self) -> Option<Duration> {
        self.retry_after
            .filter(|_| matches!(self.status, 429 | 503))
    }
}

/// The governor of `endpoint` for this process, made on first use.
pub fn shared(endpoint: &str, key: Option<&str>, caps: RateCaps) -> Arc<Governor> {
    static ALL: OnceLock<Mutex<HashMap<String, Weak<Governor>>>> = OnceLock::new();
    // Limits are per key: the key's hash keeps two accounts apart without
    // keeping the key itself a second time.
    let id = format!("{endpoint} {:x}", fingerprint(key.unwrap_or("")));
    let mut all = ALL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    all.retain(|_, governor| governor.strong_count() > 0);
    if let Some(governor) = all.get(&id).and_then(Weak::upgrade) {
        governor.tighten(caps);
        return governor;
    }
    let shared = SHARED_IN
        .get()
        .map(|dir| dir.join(format!("{:016x}", fingerprint(&id))));
    let governor = Arc::new(Governor {
        shared,
        ..Governor::new(caps)
    });
    all.insert(id, Arc::downgrade(&governor));
    governor
}

/// FNV-1a: the same in every build, so that troupe processes of two
/// versions name an endpoint's pause file alike.
fn fingerprint(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Governor {
    pub fn new(caps: RateCaps) -> Self {
        Governor {
            state: Mutex::new(State::new(caps, Instant::now())),
            changed: Notify::new(),
            shared: None,
        }
    }

    /// The pause another process of the workspace wrote, if one is on:
    /// a regular file reached through no link, of a time's few digits (it
    /// is read before every request, and any process there may have
    /// written it, as large as it liked).
    fn shared_pause(&self) -> Option<Instant> {
        let (text, more) = crate::fsutil::read_head(self.shared.as_ref()?, PAUSE_FILE_MOST).ok()?;
        if more {
            return None;
        }
        let until = UNIX_EPOCH + Duration::from_millis(text.trim().parse().ok()?);
        let left = until.duration_since(SystemTime::now()).ok()?;
        Some(Instant::now() + left.min(LONGEST_WAIT))
    }

    /// Tells the workspace's other processes of a pause until `wait` from
    /// now. Best effort: a process that misses it meets the 429 itself.
    fn share_pause(&self, wait: Duration) {
        let Some(path) = &self.shared else {
            return;
        };
        let until = SystemTime::now() + wait.min(LONGEST_WAIT);
        let Ok(millis) = until.duration_since(UNIX_EPOCH) else {
            return;
        };
        if let Some(dir) = path.parent() {
            let _ = crate::fsutil::nofollow::create_dir_all(dir);
        }
        let millis = millis.as_millis().to_string();
        let _ = crate::fsutil::write_atomic(path, millis.as_bytes(), Durability::Atomic);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn tighten(&self, caps: RateCaps) {
        let mut state = self.state();
        let tighter = |a: Option<u32>, b: Option<u32>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        state.caps = RateCaps {
            requests_per_minute: tighter(state.caps.requests_per_minute, caps.requests_per_minute),
            tokens_per_minute: tighter(state.caps.tokens_per_minute, caps.tokens_per_minute),
        };
    }

    /// Waits until a request of about `tokens` prompt tokens may start,
    /// telling `told` of each wait as it begins. Fails when the endpoint's
    /// limit is spent for longer than troupe waits.
    pub async fn admit(
        &self,
        tokens: u64,
        told: Option<&DelayObserver>,
    ) -> Result<Permit<'_>, LlmError> {
        let mut said: Option<Hold> = None;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = Instant::now();
            let elsewhere = self.shared_pause();
            let started = {
                let mut state = self.state();
                if let Some(until) = elsewhere {
                    state.paused_until = Some(state.paused_until.map_or(until, |u| u.max(until)));
                }
                state.start(now, tokens)
            };
            let hold = match started {
                Ok(()) => {
                    return Ok(Permit {
                        governor: self,
                        charged: tokens,
                    });
                }
                Err(hold) => hold,
            };
            if let Some(until) = hold.until {
                let wait = until.saturating_duration_since(now);
                if wait > LONGEST_WAIT {
                    return Err(LlmError::Relay {
                        message: format!(
                            "{} for {:.0} s more, longer than the {} s troupe waits",
                            hold.why,
                            wait.as_secs_f64(),
                            LONGEST_WAIT.as_secs()
                        ),
                        retryable: false,
                    });
                }
            }
            if let Some(told) = told
                && said.as_ref().is_none_or(|before| before.why != hold.why)
            {
                (told.0)(&Delay::Wait(Waiting {
                    reason: hold.why.clone(),
                    wait: hold.wait(now),
                }));
            }
            match hold.until {
                Some(until) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = &mut notified => {}
                    }
                }
                None => notified.await,
            }
            said = Some(hold);
        }
    }
}

impl Permit<'_> {
    /// Learns from what the endpoint answered; the permit ends here.
    pub fn answered(self, answer: &Answer<'_>) {
        self.governor
            .state()
            .answered(Instant::now(), answer, self.charged);
        if let Some(wait) = answer.pause() {
            self.governor.share_pause(wait);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.governor.state().in_flight -= 1;
        self.governor.changed.notify_waiters();
    }
}

/// Why a request may not start yet, and until when if that is known
/// (else until a request in flight ends).
#[derive(Debug, Clone, PartialEq)]
struct Hold {
    why: String,
    until: Option<Instant>,
    /// Whether `until` is when the wait ends, or only its bound.
    exact: bool,
}

impl Hold {
    fn until(why: impl Into<String>, until: Instant) -> Self {
        Hold {
            why: why.into(),
            until: Some(until),
            exact: true,
        }
    }

    fn slot(why: impl Into<String>) -> Self {
        Hold {
            why: why.into(),
            until: None,
            exact: false,
        }
    }

    /// How long it waits, where that is known.
    fn wait(&self, now: Instant) -> Option<Duration> {
        self.until
            .filter(|_| self.exact)
            .map(|until| until.saturating_duration_since(now))
    }
}

/// A limit the endpoint reported, as spent since.
#[derive(Debug, Clone, Copy)]
struct Budget {
    limit: Option<u64>,
    remaining: u64,
    /// When `remaining` is back to `limit`; `None` once that moment passed
    /// and no answer has said anything newer.
    resets_at: Option<Instant>,
}

impl Budget {
    /// Takes what an answer reported, less what the requests still in
    /// flight (`others`) may have spent that it did not count. Within the
    /// same window an earlier answer arriving late never raises it.
    fn heard(current: Option<Budget>, reported: Reported, others: u64, now: Instant) -> Budget {
        let resets_at = reported.reset.map(|reset| now + reset);
        let remaining = reported.remaining.saturating_sub(others);
        let same_window = current.is_some_and(|c| match (c.resets_at, resets_at) {
            (Some(old), Some(new)) => now < old && new <= old + Duration::from_millis(50),
            _ => false,
        });
        match current {
            Some(current) if same_window => Budget {
                remaining: current.remaining.min(remaining),
                limit: reported.limit.or(current.limit),
                ..current
            },
            _ => Budget {
                limit: reported.limit,
                remaining,
                resets_at,
            },
        }
    }

    /// Brought up to `now`: a window that has reset is full again, or
    /// allows one request to learn the new figure when the limit is not
    /// known.
    fn at(&mut self, now: Instant) {
        if self.resets_at.is_some_and(|at| at <= now) {
            self.remaining = self.limit.unwrap_or(1).max(1);
            self.resets_at = None;
        }
    }

    /// Whether `amount` fits; a request larger than the whole limit goes
    /// when the window is full.
    fn fits(&self, amount: u64) -> bool {
        self.remaining >= amount.max(1) || Some(self.remaining) == self.limit
    }
}

struct State {
    caps: RateCaps,
    in_flight: usize,
    /// Whether the endpoint has answered at all.
    answered: bool,
    /// When the first request went.
    first_sent: Option<Instant>,
    /// No request starts before this (a `Retry-After`).
    paused_until: Option<Instant>,
    /// How many may be in flight, once a 429 has said there are too many.
    concurrency: Option<usize>,
    grown_at: Instant,
    requests: Option<Budget>,
    tokens: Option<Budget>,
    /// The next moment `--max-requests-per-minute` lets a request start.
    next_start: Instant,
    /// `--max-tokens-per-minute` as a bucket: its level, and when it was
    /// last filled.
    token_level: f64,
    filled_at: Instant,
}

impl State {
    fn new(caps: RateCaps, now: Instant) -> Self {
        State {
            caps,
            in_flight: 0,
            answered: false,
            first_sent: None,
            paused_until: None,
            concurrency: None,
            grown_at: now,
            requests: None,
            tokens: None,
            next_start: now,
            token_level: caps.tokens_per_minute.map_or(0.0, f64::from),
            filled_at: now,
        }
    }

    /// Starts a request of `tokens` if nothing holds it back.
    fn start(&mut self, now: Instant, tokens: u64) -> Result<(), Hold> {
        self.bring_to(now);
        if let Some(hold) = self.hold(now, tokens) {
            return Err(hold);
        }
        for (budget, amount) in [(&mut self.requests, 1), (&mut self.tokens, tokens)] {
            if let Some(budget) = budget.as_mut() {
                budget.remaining = budget.remaining.saturating_sub(amount);
            }
        }
        if self.caps.tokens_per_minute.is_some() {
            self.token_level -= tokens as f64;
        }
        if let Some(cap) = self.caps.requests_per_minute {
            self.next_start = now + Duration::from_secs_f64(60.0 / f64::from(cap.max(1)));
        }
        self.in_flight += 1;
        self.first_sent.get_or_insert(now);
        Ok(())
    }

    /// Resets the windows that have reset, and fills the token bucket.
    fn bring_to(&mut self, now: Instant) {
        for budget in [&mut self.requests, &mut self.tokens].into_iter().flatten() {
            budget.at(now);
        }
        if let Some(cap) = self.caps.tokens_per_minute {
            let since = now.saturating_duration_since(self.filled_at).as_secs_f64();
            let level = self.token_level + since * f64::from(cap) / 60.0;
            self.token_level = level.min(f64::from(cap));
            self.filled_at = now;
        }
    }

    /// What holds a request of `tokens` back now, if anything.
    fn hold(&self, now: Instant, tokens: u64) -> Option<Hold> {
        if let Some(until) = self.paused_until.filter(|until| *until > now) {
            return Some(Hold::until(
                "the pause the endpoint asked for (Retry-After)",
                until,
            ));
        }
        if let Some(first) = self
            .first_sent
            .filter(|_| !self.answered && self.in_flight > 0)
            && now < first + FIRST_ALONE
        {
            return Some(Hold {
                exact: false,
                ..Hold::until(
                    "the endpoint's first answer, which tells its limits",
                    first + FIRST_ALONE,
                )
            });
        }
        if let Some(most) = self.concurrency.filter(|most| self.in_flight >= *most) {
            return Some(Hold::slot(format!(
                "a slot: {most} requests in flight since the endpoint answered 429"
            )));
        }
        let budgets = [
            (&self.requests, 1, "requests"),
            (&self.tokens, tokens, "tokens"),
        ];
        for (budget, amount, what) in budgets {
            let Some(budget) = budget.filter(|budget| !budget.fits(amount)) else {
                continue;
            };
            let why = format!("the endpoint's {what} limit (x-ratelimit-remaining-{what})");
            match budget.resets_at {
                Some(at) => return Some(Hold::until(why, at)),
                // Answers on their way will say more; with none, one
                // request goes to find out.
                None if self.in_flight > 0 => return Some(Hold::slot(why)),
                None => {}
            }
        }
        if self.caps.requests_per_minute.is_some() && self.next_start > now {
            return Some(Hold::until("--max-requests-per-minute", self.next_start));
        }
        if let Some(cap) = self.caps.tokens_per_minute {
            let needed = (tokens as f64).min(f64::from(cap));
            if self.token_level < needed {
                let short = (needed - self.token_level) * 60.0 / f64::from(cap);
                return Some(Hold::until(
                    "--max-tokens-per-minute",
                    now + Duration::from_secs_f64(short),
                ));
            }
        }
        None
    }

    fn answered(&mut self, now: Instant, answer: &Answer<'_>, charged: u64) {
        self.answered = true;
        let others = self.in_flight.saturating_sub(1) as u64;
        if let Some(reported) = answer.headers.requests {
            self.requests = Some(Budget::heard(self.requests, reported, others, now));
        }
        if let Some(reported) = answer.headers.tokens {
            self.tokens = Some(Budget::heard(self.tokens, reported, 0, now));
        }
        let limited = answer.status == 429;
        if let Some(wait) = answer.pause() {
            let until = now + wait.min(LONGEST_WAIT);
            self.paused_until = Some(self.paused_until.map_or(until, |u| u.max(until)));
        }
        if limited {
            self.concurrency = Some((self.in_flight / 2).max(1));
            self.grown_at = now;
            if let Some(requests) = self.requests.as_mut() {
                requests.remaining = 0;
            }
        } else if let Some(most) = self.concurrency
            && now.saturating_duration_since(self.grown_at) >= Duration::from_secs(1)
        {
            self.concurrency = Some(most + 1);
            self.grown_at = now;
        }
        if let (Some(_), Some(used)) = (self.caps.tokens_per_minute, answer.tokens) {
            self.token_level += charged as f64 - used as f64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, headers: &RateHeaders) -> Answer<'_> {
        Answer {
            status,
            headers,
            retry_after: None,
            tokens: None,
        }
    }

    fn requests(limit: u64, remaining: u64, reset_ms: u64) -> RateHeaders {
        RateHeaders {
            requests: Some(Reported {
                limit: Some(limit),
                remaining,
                reset: Some(Duration::from_millis(reset_ms)),
            }),
            tokens: None,
        }
    }

    #[test]
    fn one_request_goes_first_and_its_answer_opens_the_rest() {
        let now = Instant::now();
        let mut state = State::new(RateCaps::default(), now);
        assert!(state.start(now, 10).is_ok());
        let held = state.start(now, 10).expect_err("the second waits");
        assert_eq!(
            held.until,
            Some(now + FIRST_ALONE),
            "for two seconds at most"
        );
        let slow = now + FIRST_ALONE;
        assert!(
            state.start(slow, 10).is_ok(),
            "a slow first answer holds none back longer"
        );
        state.in_flight -= 1;
        state.answered(now, &answer(200, &RateHeaders::default()), 10);
        state.in_flight -= 1;
        for _ in 0..50 {
            assert!(state.start(now, 10).is_ok(), "no limit known, none kept");
        }
    }

    #[test]
    fn the_remaining_requests_are_spent_then_the_reset_is_awaited() {
        let now = Instant::now();
        let mut state = State::new(RateCaps::default(), now);
        state.start(now, 0).expect("first");
        state.answered(now, &answer(200, &requests(10, 3, 400)), 0);
        state.in_flight -= 1;
        for _ in 0..3 {
            state.start(now, 0).expect("within the budget");
        }
        let held = state.start(now, 0).expect_err("spent");
        assert_eq!(held.until, Some(now + Duration::from_millis(400)));
        let later = now + Duration::from_millis(401);
        for _ in 0..10 {
            state
                .start(later, 0)
                .expect("the window reset to its limit");
        }
        assert!(state.start(later, 0).is_err());
    }

    #[test]
    fn a_late_answer_of_the_same_window_never_raises_the_budget() {
        let now = Instant::now();
        let current = Budget::heard(
            None,
            Reported {
                limit: Some(10),
                remaining: 2,
                reset: Some(Duration::from_millis(500)),
            },
            0,
            now,
        );
        let late = Reported {
            limit: Some(10),
            remaining: 7,
            reset: Some(Duration::from_millis(520)),
        };
        let heard = Budget::heard(Some(current), late, 0, now + Duration::from_millis(10));
        assert_eq!(heard.remaining, 2);
    }

    #[test]
    fn a_429_pauses_everyone_and_halves_what_is_in_flight() {
        let now = Instant::now();
        let mut state = State::new(RateCaps::default(), now);
        state.answered = true;
        for _ in 0..8 {
            state.start(now, 0).expect("open");
        }
        let told = RateHeaders::default();
        state.answered(
            now,
            &Answer {
                retry_after: Some(Duration::from_secs(2)),
                ..answer(429, &told)
            },
            0,
        );
        state.in_flight -= 1;
        let held = state.start(now, 0).expect_err("paused");
        assert_eq!(held.until, Some(now + Duration::from_secs(2)));
        assert_eq!(state.concurrency, Some(4));
        let later = now + Duration::from_secs(3);
        state.in_flight = 3;
        state.start(later, 0).expect("one slot of four");
        assert!(state.start(later, 0).is_err(), "four in flight");
        state.answered(later, &answer(200, &told), 0);
        assert_eq!(state.concurrency, Some(5), "a second without a 429");
    }

    #[test]
    fn the_users_caps_space_requests_and_tokens() {
        let now = Instant::now();
        let caps = RateCaps {
            requests_per_minute: Some(120),
            tokens_per_minute: Some(6000),
        };
        let mut state = State::new(caps, now);
        state.answered = true;
        state.start(now, 1000).expect("first");
        let held = state.start(now, 1000).expect_err("half a second apart");
        assert_eq!(held.until, Some(now + Duration::from_millis(500)));
        let later = now + Duration::from_millis(500);
        state.start(later, 4000).expect("the bucket holds 5,050");
        let held = state
            .start(later + Duration::from_millis(500), 4000)
            .expect_err("short");
        assert!(held.why.contains("--max-tokens-per-minute"));
    }
}
