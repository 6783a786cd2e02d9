//! What a model's tokens cost: `[prices."MODEL"]` in the config file, in
//! US dollars per million tokens. A model without a price has an unknown
//! cost, never a guessed one.

use serde::Deserialize;

use crate::chat::Usage;

#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Per million prompt tokens.
    pub input: f64,
    /// Per million completion tokens.
    pub output: f64,
    /// Per million prompt tokens the provider served from its cache;
    /// `input` unless set.
    pub cached_input: Option<f64>,
}

impl Price {
    /// What is wrong with it, in words, if anything.
    pub fn check(&self) -> Result<(), String> {
        let rates = [Some(self.input), Some(self.output), self.cached_input];
        match rates
            .into_iter()
            .flatten()
            .all(|r| r.is_finite() && r >= 0.0)
        {
            true => Ok(()),
            false => Err(
                "input, output and cached_input are dollars per million tokens, 0 or more"
                    .to_string(),
            ),
        }
    }
}

/// `usage` with its cost by `price`, or marked unknown without one.
pub fn priced(usage: Usage, price: Option<&Price>) -> Usage {
    let Some(price) = price else {
        return Usage {
            unpriced: true,
            ..usage
        };
    };
    let cached = usage.cached.min(usage.prompt);
    let fresh = usage.prompt - cached;
    let dollars = (fresh as f64 * price.input
        + cached as f64 * price.cached_input.unwrap_or(price.input)
        + usage.completion as f64 * price.output)
        / 1e6;
    Usage {
        cost_micros: crate::chat::micros(dollars),
        ..usage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_tokens_are_priced_at_the_cached_rate() {
        let price = Price {
            input: 2.0,
            output: 8.0,
            cached_input: Some(0.5),
        };
        let usage = Usage {
            cached: 600_000,
            ..Usage::new(1_000_000, 100_000)
        };
        // 400k fresh at $2, 600k cached at $0.50, 100k out at $8.
        assert_eq!(priced(usage, Some(&price)).cost(), Some(1.9));
        assert_eq!(priced(usage, None).cost(), None);
    }
}
