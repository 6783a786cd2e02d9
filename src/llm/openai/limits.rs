//! What an endpoint says of its own rate limits, in the headers of each
//! answer: OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`
//! (which Groq, DeepSeek, Mistral's gateways and vLLM routers copy), and the
//! bare `x-ratelimit-{limit,remaining,reset}` of OpenRouter and most API
//! gateways, which count requests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

/// One limit as an answer reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reported {
    pub limit: Option<u64>,
    pub remaining: u64,
    /// How long until `remaining` is back to `limit`, where the answer said.
    pub reset: Option<Duration>,
}

/// The request and token limits of one answer; either may be missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RateHeaders {
    pub requests: Option<Reported>,
    pub tokens: Option<Reported>,
}

impl RateHeaders {
    pub fn read(headers: &HeaderMap) -> Self {
        let requests = reported(headers, "-requests").or_else(|| reported(headers, ""));
        RateHeaders {
            requests,
            tokens: reported(headers, "-tokens"),
        }
    }
}

fn reported(headers: &HeaderMap, kind: &str) -> Option<Reported> {
    let text = |what: &str| {
        headers
            .get(format!("x-ratelimit-{what}{kind}"))
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    let count = |what: &str| text(what).and_then(|value| value.parse::<u64>().ok());
    Some(Reported {
        remaining: count("remaining")?,
        limit: count("limit"),
        reset: text("reset").and_then(reset),
    })
}

/// A reset as endpoints write it: a Go duration (`1s`, `6m0s`, `20ms`,
/// `1h2m3.5s`), a number of seconds, or a moment in Unix seconds or
/// milliseconds (OpenRouter's).
fn reset(text: &str) -> Option<Duration> {
    if let Ok(number) = text.parse::<f64>() {
        if !number.is_finite() || number < 0.0 {
            return None;
        }
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        return Some(match number {
            n if n > 1e12 => Duration::from_millis(n as u64).saturating_sub(now),
            n if n > 1e9 => Duration::from_secs_f64(n).saturating_sub(now),
            n => Duration::from_secs_f64(n),
        });
    }
    go_duration(text)
}

fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            _ => return None,
        };
        total += number * scale;
        rest = &rest[unit..];
    }
    Some(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn openai_headers_give_both_limits() {
        let read = RateHeaders::read(&headers(&[
            ("x-ratelimit-limit-requests", "500"),
            ("x-ratelimit-remaining-requests", "499"),
            ("x-ratelimit-reset-requests", "120ms"),
            ("x-ratelimit-limit-tokens", "30000"),
            ("x-ratelimit-remaining-tokens", "29000"),
            ("x-ratelimit-reset-tokens", "1m2.5s"),
        ]));
        let requests = read.requests.expect("requests");
        assert_eq!(requests.limit, Some(500));
        assert_eq!(requests.remaining, 499);
        assert_eq!(requests.reset, Some(Duration::from_millis(120)));
        assert_eq!(
            read.tokens.expect("tokens").reset,
            Some(Duration::from_secs_f64(62.5))
        );
    }

    #[test]
    fn bare_headers_count_requests_and_resets_may_be_moments() {
        let read = RateHeaders::read(&headers(&[
            ("x-ratelimit-remaining", "3"),
            ("x-ratelimit-reset", "2"),
        ]));
        let requests = read.requests.expect("requests");
        assert_eq!((requests.limit, requests.remaining), (None, 3));
        assert_eq!(requests.reset, Some(Duration::from_secs(2)));
        assert!(read.tokens.is_none());
        let past = reset("1700000000000").expect("a moment in milliseconds");
        assert_eq!(past, Duration::ZERO, "a moment gone is no wait");
    }

    #[test]
    fn what_is_not_a_number_or_a_duration_is_no_limit() {
        let read = RateHeaders::read(&headers(&[
            ("x-ratelimit-remaining-requests", "many"),
            ("x-ratelimit-remaining-tokens", "10"),
            ("x-ratelimit-reset-tokens", "soon"),
        ]));
        assert!(read.requests.is_none());
        assert_eq!(read.tokens.expect("tokens").reset, None);
        assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go_duration("3x"), None);
    }
}
