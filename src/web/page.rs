//! A fetched page as an agent reads it: an HTML page's main text (a port
//! of Firefox's Reader View, `dom_smoothie`) as Markdown with its links
//! absolute, or as plain text; anything else as the text it is; `raw`
//! gives the bytes as they came when they are text.

use serde::Deserialize;

use super::fetch::Got;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Markdown,
    Text,
    Raw,
}

/// What the agent is shown of a page.
pub struct Shown {
    pub title: Option<String>,
    pub content: String,
    /// Cut at the agent's `max_bytes`, or at troupe's download cap.
    pub truncated: bool,
}

/// `got` in `format`, at most `max` bytes of it.
pub fn show(got: &Got, format: Format, max: usize) -> Result<Shown, String> {
    let html = matches!(
        got.content_type.as_str(),
        "text/html" | "application/xhtml+xml"
    );
    let (title, content) = match (format, html) {
        (Format::Raw, _) => {
            let text = std::str::from_utf8(&got.body).map_err(|_| {
                "its bytes are not UTF-8 text: ask for markdown or text".to_string()
            })?;
            (None, text.to_string())
        }
        (_, true) => readable(got, format),
        (_, false) => (None, String::from_utf8_lossy(&got.body).into_owned()),
    };
    let (content, cut) = cut(content, max);
    Ok(Shown {
        title: title.filter(|t| !t.trim().is_empty()),
        content,
        truncated: cut || got.truncated,
    })
}

/// An HTML page's title and main text; the whole page as Markdown when no
/// article is found in it.
fn readable(got: &Got, format: Format) -> (Option<String>, String) {
    let html = String::from_utf8_lossy(&got.body);
    let config = dom_smoothie::Config {
        text_mode: match format {
            Format::Text => dom_smoothie::TextMode::Formatted,
            Format::Markdown | Format::Raw => dom_smoothie::TextMode::Markdown,
        },
        ..dom_smoothie::Config::default()
    };
    let article = dom_smoothie::Readability::new(html.as_ref(), Some(&got.final_url), Some(config))
        .and_then(|mut reader| reader.parse());
    match article {
        Ok(article) => (Some(article.title), article.text_content.to_string()),
        Err(_) => {
            let page = dom_query::Document::from(html.as_ref());
            (None, page.md(None).to_string())
        }
    }
}

/// `text` cut to at most `max` bytes at a character's edge, and whether
/// it was cut.
fn cut(mut text: String, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    (text, true)
}
