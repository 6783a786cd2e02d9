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

/// `n` and `noun`, in the plural unless `n` is 1: "1 agent", "3 agents",
/// "2 searches".
pub fn count(n: impl TryInto<u64>, noun: &str) -> String {
    match n.try_into().unwrap_or(u64::MAX) {
        1 => format!("1 {noun}"),
        n if noun.ends_with(['s', 'x']) || noun.ends_with("ch") || noun.ends_with("sh") => {
            format!("{n} {noun}es")
        }
        n => format!("{n} {noun}s"),
    }
}

/// The longest suffix of `text` of at most `max` bytes that starts on a
/// character boundary.
pub fn suffix(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// `text` with its middle left out when it is longer than `head + tail`
/// bytes: the first `head` and last `tail` bytes, and between them a line
/// that says how much is missing and why (`why`).
pub fn head_and_tail(text: &str, head: usize, tail: usize, why: &str) -> String {
    if text.len() <= head + tail {
        return text.to_string();
    }
    let first = prefix(text, head);
    let last = suffix(text, tail);
    let cut = text.len() - first.len() - last.len();
    format!("{first}\n[... {cut} bytes left out {why} ...]\n{last}")
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

/// `text` fit for a terminal: every control character (escapes, bells,
/// carriage returns, the C1 set) written out as `\u{..}`, but newlines,
/// tabs and the colour sequences troupe paints with (`ESC [ digits ; m`).
/// A model's or a command's output can then neither set the clipboard
/// (OSC 52), move the cursor nor overwrite a line of troupe's.
pub fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '\u{1b}' {
            let colour = rest[1..].strip_prefix('[').and_then(|after| {
                let params = after.find(|c: char| !(c.is_ascii_digit() || c == ';'))?;
                after[params..].starts_with('m').then_some(params + 3)
            });
            if let Some(len) = colour {
                out.push_str(&rest[..len]);
                rest = &rest[len..];
                continue;
            }
        }
        match unsafe_char(c) {
            true => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            false => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    std::borrow::Cow::Owned(out)
}

/// `text` with every control character but those in `kept` written out
/// as `\u{..}`, colour sequences too: what an agent or a model wrote,
/// shown or logged, then cannot act on a terminal that reads it later.
pub fn controls_written_out<'a>(text: &'a str, kept: &[char]) -> std::borrow::Cow<'a, str> {
    let written = |c: char| c.is_control() && !kept.contains(&c);
    if !text.chars().any(written) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match written(c) {
            true => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            false => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// What a caught panic said, for an error message.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".to_string())
}

/// Rows of cells in aligned columns, two spaces apart, each line starting
/// with `indent`.
pub fn columns<const N: usize>(indent: &str, header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        format!("{indent}{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// Replaces every `{name}` in `template` by its value, in one pass, so a
/// value that itself contains braces (a task quoting code) is left alone.
/// Unknown names stay as they are.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            values
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v, close))
        });
        match value {
            Some((value, close)) => {
                out.push_str(value);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The first balanced `{...}` in `text` that parses as a JSON object:
/// what a model means when it wraps JSON in a Markdown fence or in prose.
/// Braces inside JSON strings are skipped; a balanced piece that is not
/// JSON (`{placeholder}` in prose) is passed over for the next one.
pub fn first_json_object(text: &str) -> Option<&str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    while let Some(offset) = text[start..].find('{') {
        let open = start + offset;
        if let Some(close) = balanced_end(bytes, open) {
            let candidate = &text[open..=close];
            if serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(candidate).is_ok()
            {
                return Some(candidate);
            }
        }
        start = open + 1;
    }
    None
}

/// The index of the `}` that closes the `{` at `open`, if any.
fn balanced_end(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_say_their_plural() {
        assert_eq!(super::count(1, "search"), "1 search");
        assert_eq!(super::count(0, "search"), "0 searches");
        assert_eq!(super::count(2, "agent"), "2 agents");
        assert_eq!(super::count(3, "box"), "3 boxes");
        assert_eq!(super::count(1, "successful call"), "1 successful call");
    }

    #[test]
    fn a_terminal_sees_colours_and_no_other_escape() {
        use super::terminal_safe;
        assert_eq!(terminal_safe("plain\tline\n"), "plain\tline\n");
        assert_eq!(
            terminal_safe("\u{1b}[1;31mred\u{1b}[0m"),
            "\u{1b}[1;31mred\u{1b}[0m"
        );
        assert_eq!(
            terminal_safe("\u{1b}]52;c;cGF3bmVk\u{7}x"),
            "\\u{1b}]52;c;cGF3bmVk\\u{7}x"
        );
        assert_eq!(terminal_safe("a\rb\u{9b}2J"), "a\\u{d}b\\u{9b}2J");
        assert_eq!(terminal_safe("\u{1b}[2J"), "\\u{1b}[2J");
    }

    #[test]
    fn head_and_tail_keeps_both_ends_and_whole_characters() {
        let text = "é".repeat(100);
        let cut = super::head_and_tail(&text, 11, 11, "for the test");
        assert!(cut.starts_with(&"é".repeat(5)));
        assert!(cut.ends_with(&"é".repeat(5)));
        assert!(cut.contains("[... 180 bytes left out for the test ...]"));
        assert_eq!(super::head_and_tail("short", 3, 2, "x"), "short");
    }

    use super::first_json_object;

    #[test]
    fn finds_the_object_in_fences_and_prose() {
        let fenced = "Here is the plan:\n```json\n{\"a\": \"}\", \"b\": {\"c\": 1}}\n```\nDone.";
        assert_eq!(
            first_json_object(fenced),
            Some("{\"a\": \"}\", \"b\": {\"c\": 1}}")
        );
        let prose = "Fill in {name} later. {\"approved\": false}";
        assert_eq!(first_json_object(prose), Some("{\"approved\": false}"));
        assert_eq!(first_json_object("looks good to me, it passes"), None);
        assert_eq!(first_json_object("{\"open\": 1"), None);
    }
}
