//! Which providers want a thinking model's `reasoning_content` sent back
//! with the conversation, and which refuse it.

use std::str::FromStr;

/// Whether assistant messages carry `reasoning_content` back to the
/// provider. Providers disagree: DeepSeek's thinking mode answers 400
/// unless every assistant message has it, Mistral answers 422 if any has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningEcho {
    /// Send back what the provider sent, nothing where it sent nothing.
    Keep,
    /// Send it on every assistant message, "" where there was none.
    Always,
    /// Never send it.
    Never,
}

impl ReasoningEcho {
    /// The default for an endpoint: what its provider is known to need.
    pub fn for_endpoint(base_url: &str) -> Self {
        let host = base_url
            .split("://")
            .nth(1)
            .unwrap_or(base_url)
            .split(['/', ':'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if host.ends_with("deepseek.com") {
            ReasoningEcho::Always
        } else if host.ends_with("mistral.ai") {
            ReasoningEcho::Never
        } else {
            ReasoningEcho::Keep
        }
    }
}

/// `auto` (by endpoint), `keep`, `always` or `never`; `None` is `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningEchoChoice(pub Option<ReasoningEcho>);

impl FromStr for ReasoningEchoChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(ReasoningEchoChoice(None)),
            "keep" => Ok(ReasoningEchoChoice(Some(ReasoningEcho::Keep))),
            "always" => Ok(ReasoningEchoChoice(Some(ReasoningEcho::Always))),
            "never" => Ok(ReasoningEchoChoice(Some(ReasoningEcho::Never))),
            other => Err(format!(
                "`{other}` is not a reasoning echo mode; use auto, keep, always or never"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReasoningEcho;

    #[test]
    fn defaults_follow_the_provider() {
        let of = ReasoningEcho::for_endpoint;
        assert_eq!(of("https://api.deepseek.com/v1"), ReasoningEcho::Always);
        assert_eq!(of("https://api.mistral.ai/v1"), ReasoningEcho::Never);
        assert_eq!(of("http://localhost:11434/v1"), ReasoningEcho::Keep);
    }
}
