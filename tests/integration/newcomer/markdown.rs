//! The README and `docs/` read the way GitHub shows them: headings and
//! their anchors, links, sections, tables and code blocks, with fenced
//! code and code spans left out where a reader would not see a link.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The root of the repository, where the README is.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

pub fn readme() -> String {
    read(&repo().join("README.md"))
}

/// README.md and every Markdown file in docs/.
pub fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("a docs/ directory")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    docs.insert(0, repo().join("README.md"));
    docs
}

/// Each line, with whether it belongs to a fenced code block (its fences
/// included).
fn lines(text: &str) -> Vec<(bool, &str)> {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            let fence = line.trim_start().starts_with("```");
            if fence {
                fenced = !fenced;
            }
            (fence || fenced, line)
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct Heading {
    pub level: usize,
    pub title: String,
}

pub fn headings(text: &str) -> Vec<Heading> {
    lines(text)
        .into_iter()
        .filter(|(code, _)| !code)
        .filter_map(|(_, line)| {
            let level = line.chars().take_while(|c| *c == '#').count();
            let title = line[level..].strip_prefix(' ')?;
            (1..=6).contains(&level).then(|| Heading {
                level,
                title: title.trim().to_string(),
            })
        })
        .collect()
}

/// GitHub's anchor of a heading: lower case, every character but letters,
/// digits, `-`, `_` and spaces dropped, spaces made `-`.
pub fn anchor(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a text's headings; a repeated one gets `-1`, `-2`, ...
/// as on GitHub.
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    headings(text)
        .iter()
        .map(|heading| {
            let base = anchor(&heading.title);
            let n = seen.entry(base.clone()).or_default();
            let name = match *n {
                0 => base,
                n => format!("{base}-{n}"),
            };
            *n += 1;
            name
        })
        .collect()
}

/// The text outside fenced code blocks and code spans.
fn prose(text: &str) -> String {
    let outside: Vec<&str> = lines(text)
        .into_iter()
        .map(|(code, line)| if code { "" } else { line })
        .collect();
    let mut in_span = false;
    outside
        .join("\n")
        .chars()
        .filter(|c| {
            if *c == '`' {
                in_span = !in_span;
                return false;
            }
            !in_span
        })
        .collect()
}

/// The targets of a text's Markdown links, `[text](target)`.
pub fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &prose[at + 2..];
            Some(rest[..rest.find(')')?].to_string())
        })
        .collect()
}

/// The section under the first heading whose title starts with `title`,
/// down to the next heading of its level or a higher one.
pub fn section<'a>(text: &'a str, title: &str) -> &'a str {
    let mut start = None;
    let mut offset = 0;
    for (code, line) in lines(text) {
        if !code {
            let level = line.chars().take_while(|c| *c == '#').count();
            if let Some(rest) = line[level..].strip_prefix(' ').filter(|_| level > 0) {
                match start {
                    None if rest.starts_with(title) => start = Some((offset, level)),
                    Some((from, at)) if level <= at => return &text[from..offset],
                    _ => {}
                }
            }
        }
        offset += line.len() + 1;
    }
    let (from, _) = start.unwrap_or_else(|| panic!("no heading `{title}`"));
    &text[from..]
}

/// The fenced code blocks of a text: each one's info string and body.
pub fn code_blocks(text: &str) -> Vec<(String, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(info), None) => open = Some((info.trim().to_string(), String::new())),
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some((info, mut body))) => {
                body.push_str(line);
                body.push('\n');
                open = Some((info, body));
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The bodies of the fenced code blocks marked runnable: the line
/// before the fence is `<!-- runnable -->`, which GitHub does not show.
pub fn runnable_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut marked = false;
    let mut open: Option<String> = None;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        match (fence, open.take()) {
            (true, None) if marked => open = Some(String::new()),
            (true, Some(block)) => blocks.push(block),
            (false, Some(mut body)) => {
                body.push_str(line);
                body.push('\n');
                open = Some(body);
            }
            _ => {}
        }
        marked = line.trim() == "<!-- runnable -->";
    }
    blocks
}

/// The first table whose header's first cell is `first`: its header row,
/// then its body rows; cells trimmed, `\|` read as `|`.
pub fn table(text: &str, first: &str) -> Vec<Vec<String>> {
    let cells = |line: &str| -> Vec<String> {
        let line = line.trim().trim_start_matches('|').trim_end_matches('|');
        line.replace("\\|", "\u{0}")
            .split('|')
            .map(|cell| cell.trim().replace('\u{0}', "|"))
            .collect()
    };
    let rows: Vec<&str> = text.lines().collect();
    let header = rows
        .iter()
        .position(|line| line.starts_with('|') && cells(line)[0] == first)
        .unwrap_or_else(|| panic!("no table whose first column is `{first}`"));
    std::iter::once(rows[header])
        .chain(
            rows[header + 2..]
                .iter()
                .copied()
                .take_while(|line| line.starts_with('|')),
        )
        .map(cells)
        .collect()
}

/// What a text quotes in code spans, in order.
pub fn quoted(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}
