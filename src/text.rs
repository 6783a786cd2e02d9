//! Cutting text to size without splitting a character, for error messages,
//! progress lines and capped tool output.

/// The longest prefix of `text` of at most `max` bytes that ends on a
/// character boundary.
pub fn prefix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` trimmed and cut to `max` bytes, with `…` where it was cut.
pub fn excerpt(text: &str, max: usize) -> String {
    let text = text.trim();
    let cut = prefix(text, max);
    if cut.len() == text.len() {
        cut.to_string()
    } else {
        format!("{cut}…")
    }
}
