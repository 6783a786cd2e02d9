//! An attempt's diff stat, made from one `git diff --numstat -z` (which
//! also gives the changed paths) instead of a second git process for
//! `--stat`.

/// One changed path: lines added and deleted, `None` for a binary file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    pub path: String,
    pub lines: Option<(u64, u64)>,
}

/// `added\tdeleted\tpath\0` per path (`-\t-\t` for a binary one).
pub fn parse_numstat(text: &str) -> Vec<Counted> {
    text.split('\0')
        .filter(|entry| !entry.is_empty())
        .filter_map(|entry| {
            let mut fields = entry.splitn(3, '\t');
            let (added, deleted, path) = (fields.next()?, fields.next()?, fields.next()?);
            let lines = added.parse().ok().zip(deleted.parse().ok());
            Some(Counted {
                path: path.to_string(),
                lines,
            })
        })
        .collect()
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
        let counted = parse_numstat(concat!(
            "1\t0\ta.txt\0",
            "-\t-\timage.png\0",
            "2\t3\tsrc/lib.rs\0"
        ));
        assert_eq!(counted.len(), 3);
        assert_eq!(counted[1].lines, None);
        assert_eq!(
            render(&counted),
            " a.txt      | 1 +\n image.png  | Bin\n src/lib.rs | 5 ++---\n 3 files changed, 3 insertions(+), 3 deletions(-)\n"
        );
        assert_eq!(
            render(&parse_numstat("1\t0\ta.txt\0")),
            " a.txt | 1 +\n 1 file changed, 1 insertion(+)\n"
        );
    }
}
