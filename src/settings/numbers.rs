//! The one way every numeric flag is read, so that `--timeout -5`,
//! `--timeout 0` and `--timeout 1.5` get the same kind of answer: what the
//! value must be, in words. Each flag that takes one also takes a leading
//! `-`, so a negative number reaches these parsers rather than being
//! mistaken for a flag.

/// Seconds, 1 or more.
pub fn seconds(text: &str) -> Result<u64, String> {
    whole(text, 1).map_err(|()| "must be a positive whole number of seconds".to_string())
}

/// Seconds, where 0 turns the limit off.
pub fn seconds_or_off(text: &str) -> Result<u64, String> {
    whole(text, 0).map_err(|()| "must be a whole number of seconds (0 turns it off)".to_string())
}

/// Seconds, 0 allowed (a grace period).
pub fn seconds_or_none(text: &str) -> Result<u64, String> {
    whole(text, 0).map_err(|()| "must be a whole number of seconds (0 or more)".to_string())
}

/// US dollars, more than 0 (`0.50`, `$2`).
pub fn dollars(text: &str) -> Result<f64, String> {
    let amount = text.trim().trim_start_matches('$');
    match amount.parse::<f64>() {
        Ok(dollars) if dollars.is_finite() && dollars > 0.0 => Ok(dollars),
        _ => Err("must be an amount of US dollars above 0, e.g. 2.50".to_string()),
    }
}

/// A count, 1 or more.
pub fn positive<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    whole(text, 1).map_err(|()| "must be a positive whole number".to_string())
}

/// An agent's id: a number from 1, the name of its directory `agent_N`.
pub fn agent_id(text: &str) -> Result<u32, String> {
    whole(text, 1).map_err(|()| {
        "must be a number from 1 (the agent's directory is agent_N; status, wait and terminate take the same number)".to_string()
    })
}

/// A count, 0 or more.
pub fn count<T: TryFrom<u64>>(text: &str) -> Result<T, String> {
    whole(text, 0).map_err(|()| "must be a whole number (0 or more)".to_string())
}

/// Tokens of a model's context: 256 or more.
pub fn context_tokens(text: &str) -> Result<u32, String> {
    whole(text, 256).map_err(|()| "must be a whole number of tokens, 256 or more".to_string())
}

/// A size in bytes, with an optional binary unit (`512M`, `4G`, `4GiB`);
/// 0 turns the bound off.
pub fn bytes_or_off(text: &str) -> Result<u64, String> {
    let wrong = || "must be a size in bytes, like 4G or 512M (0 turns it off)".to_string();
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let shift = match unit.trim_end_matches("iB").trim_end_matches('B') {
        "" => 0,
        "K" | "k" => 10,
        "M" | "m" => 20,
        "G" | "g" => 30,
        "T" | "t" => 40,
        _ => return Err(wrong()),
    };
    let value: u64 = whole(number, 0).map_err(|()| wrong())?;
    value.checked_mul(1 << shift).ok_or_else(wrong)
}

/// `text` as a whole number of at least `min` that fits `T`.
fn whole<T: TryFrom<u64>>(text: &str, min: u64) -> Result<T, ()> {
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    let value: u64 = text.parse().map_err(|_| ())?;
    if value < min {
        return Err(());
    }
    T::try_from(value).map_err(|_| ())
}

#[cfg(test)]
mod tests {
    use super::{bytes_or_off, count, positive, seconds, seconds_or_off};

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(bytes_or_off("4G"), Ok(4 << 30));
        assert_eq!(bytes_or_off("512MiB"), Ok(512 << 20));
        assert_eq!(bytes_or_off("1000"), Ok(1000));
        assert_eq!(bytes_or_off("0"), Ok(0));
        for bad in ["", "G", "4X", "-1G", "1.5G", "99999999999T"] {
            assert!(bytes_or_off(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn one_message_for_every_wrong_number() {
        for bad in ["-5", "0", "1.5", "ten", "", "+3", "99999999999999999999"] {
            assert_eq!(
                seconds(bad),
                Err("must be a positive whole number of seconds".to_string()),
                "{bad}"
            );
        }
        assert_eq!(seconds("30"), Ok(30));
        assert_eq!(seconds_or_off("0"), Ok(0));
        assert_eq!(
            positive::<u32>("4294967296"),
            Err("must be a positive whole number".to_string())
        );
        assert_eq!(count::<u32>("0"), Ok(0));
    }
}
