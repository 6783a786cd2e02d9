//! An attempt's diff stat and the modes of its paths, made from one
//! `git diff --raw --numstat -z` (which also gives the changed paths)
//! instead of a git process for each.

/// One changed path: lines added and deleted, `None` for a binary file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub path: String,
    pub lines: Option<(u64, u64)>,
}

/// One changed path as `--raw` gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Raw {
    pub path: String,
    pub old_mode: String,
    pub new_mode: String,
    /// The blob it is now.
    pub new_id: String,
}

/// `--raw -z` records (`:modes ids status\0path\0`, renames off) and
/// `--numstat -z` ones (`added\tdeleted\tpath\0`, `-\t-\t` for a binary
/// file), as one `git diff` prints them.
pub fn parse_diff(text: &str) -> (Vec<Raw>, Vec<Counted>) {
    let mut raw = Vec::new();
    let mut counted = Vec::new();
    let mut fields = text.split('\0').filter(|field| !field.is_empty());
    while let Some(field) = fields.next() {
        if let Some(meta) = field.strip_prefix(':') {
            let parts: Vec<&str> = meta.split_whitespace().collect();
            let (Some(path), [old_mode, new_mode, _, new_id, _]) = (fields.next(), &parts[..])
            else {
                continue;
            };
            raw.push(Raw {
                path: path.to_string(),
                old_mode: old_mode.to_string(),
                new_mode: new_mode.to_string(),
                new_id: new_id.to_string(),
            });
            continue;
        }
        let mut parts = field.splitn(3, '\t');
        if let (Some(added), Some(deleted), Some(path)) = (parts.next(), parts.next(), parts.next())
        {
            counted.push(Counted {
                path: path.to_string(),
                lines: added.parse().ok().zip(deleted.parse().ok()),
            });
        }
    }
    (raw, counted)
}

/// The widest bar of `+` and `-`, as git draws it.
const BAR: u64 = 40;

/// The stat as `git diff --stat` shows it: a line per path (for the first
/// `LISTED_FILES` of them, then how many more), then the totals of all.
pub fn render(counted: &[Counted]) -> String {
    let shown = &counted[..counted.len().min(crate::protocol::LISTED_FILES)];
    let width = shown.iter().map(|c| c.path.len()).max().unwrap_or(0);
    let most = shown
        .iter()
        .filter_map(|c| c.lines.map(|(a, d)| a + d))
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    let (added, deleted) = counted
        .iter()
        .filter_map(|c| c.lines)
        .fold((0, 0), |(a, d), (ca, cd)| (a + ca, d + cd));
    for c in shown {
        match c.lines {
            Some((a, d)) => {
                let scale = |n: u64| match most > BAR {
                    true => (n * BAR).div_ceil(most),
                    false => n,
                };
                let bar = format!(
                    "{}{}",
                    "+".repeat(scale(a) as usize),
                    "-".repeat(scale(d) as usize)
                );
                out.push_str(&format!(" {:width$} | {} {bar}\n", c.path, a + d));
            }
            None => out.push_str(&format!(" {:width$} | Bin\n", c.path)),
        }
    }
    if shown.len() < counted.len() {
        out.push_str(&format!(" ... and {} more\n", counted.len() - shown.len()));
    }
    let plural = |n: u64, word: &str| match n {
        1 => format!("{n} {word}"),
        _ => format!("{n} {word}s"),
    };
    let mut total = format!(" {} changed", plural(counted.len() as u64, "file"));
    if added > 0 || deleted == 0 {
        total.push_str(&format!(", {}(+)", plural(added, "insertion")));
    }
    if deleted > 0 {
        total.push_str(&format!(", {}(-)", plural(deleted, "deletion")));
    }
    out.push_str(&total);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stat_reads_like_gits() {
        let (raw, counted) = parse_diff(concat!(
            ":000000 100644 0000000 587be6b A\0a.txt\0",
            ":100644 000000 587be6b 0000000 D\0with\ttab\0",
            "1\t0\ta.txt\0",
            "-\t-\timage.png\0",
            "2\t3\tsrc/lib.rs\0"
        ));
        assert_eq!(raw.len(), 2);
        assert_eq!(raw[1].path, "with\ttab");
        assert_eq!(
            (raw[0].new_mode.as_str(), raw[0].new_id.as_str()),
            ("100644", "587be6b")
        );
        assert_eq!(counted.len(), 3);
        assert_eq!(counted[1].lines, None);
        assert_eq!(
            render(&counted),
            " a.txt      | 1 +\n image.png  | Bin\n src/lib.rs | 5 ++---\n 3 files changed, 3 insertions(+), 3 deletions(-)\n"
        );
        assert_eq!(
            render(&parse_diff("1\t0\ta.txt\0").1),
            " a.txt | 1 +\n 1 file changed, 1 insertion(+)\n"
        );
    }
}
