//! Web search through the backend the run names: SearXNG's JSON API (a
//! self-hosted one, or any endpoint that speaks it), the Brave Search API
//! or Tavily. The backend is the user's, reached by troupe like the model
//! endpoint; its key is read from the variable the config names and sent
//! only to it, never to an agent or into a record.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};

use super::WebError;

const SEARCH_LIMIT: Duration = Duration::from_secs(20);
const BRAVE: &str = "https://api.search.brave.com/res/v1/web/search";
const TAVILY: &str = "https://api.tavily.com/search";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchKind {
    Searxng,
    Brave,
    Tavily,
}

/// A search backend, its key held. `Debug` never shows the key.
#[derive(Clone)]
pub struct SearchBackend {
    kind: SearchKind,
    url: String,
    key: Option<String>,
}

impl std::fmt::Debug for SearchBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchBackend")
            .field("kind", &self.kind)
            .field("url", &self.url)
            .field("key", &self.key.as_ref().map(|_| "(held)"))
            .finish()
    }
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

impl SearchBackend {
    /// A backend of `kind` at `url` (the kind's public API without one;
    /// SearXNG has none), with the key `key_env` names. What is wrong, in
    /// words.
    pub fn new(
        kind: SearchKind,
        url: Option<String>,
        key_env: Option<&str>,
    ) -> Result<SearchBackend, String> {
        let key = match key_env {
            Some(env) => Some(
                std::env::var(env)
                    .ok()
                    .filter(|k| !k.trim().is_empty())
                    .ok_or_else(|| {
                        format!("[web.search] api_key_env names {env}, which is not set")
                    })?,
            ),
            None => None,
        };
        let url = match (kind, url) {
            (_, Some(url)) => url,
            (SearchKind::Searxng, None) => {
                return Err(
                    "[web.search] kind = \"searxng\" needs url, e.g. http://127.0.0.1:8888"
                        .to_string(),
                );
            }
            (SearchKind::Brave, None) => BRAVE.to_string(),
            (SearchKind::Tavily, None) => TAVILY.to_string(),
        };
        if kind != SearchKind::Searxng && key.is_none() {
            return Err(format!(
                "[web.search] kind = \"{}\" needs api_key_env, the variable that holds its key",
                SearchBackend::name_of(kind)
            ));
        }
        reqwest::Url::parse(&url).map_err(|e| format!("[web.search] url {url:?}: {e}"))?;
        Ok(SearchBackend { kind, url, key })
    }

    fn name_of(kind: SearchKind) -> &'static str {
        match kind {
            SearchKind::Searxng => "searxng",
            SearchKind::Brave => "brave",
            SearchKind::Tavily => "tavily",
        }
    }

    pub fn kind_name(&self) -> &'static str {
        SearchBackend::name_of(self.kind)
    }

    /// At most `max` results for `query`.
    pub async fn search(&self, query: &str, max: usize) -> Result<Vec<Hit>, WebError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(SEARCH_LIMIT)
            .user_agent(concat!("troupe/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| WebError::Search(e.to_string()))?;
        let key = self.key.clone().unwrap_or_default();
        let request = match self.kind {
            SearchKind::Searxng => {
                let mut url = self.endpoint()?;
                if !url.path().ends_with("/search") {
                    let path = format!("{}/search", url.path().trim_end_matches('/'));
                    url.set_path(&path);
                }
                url.query_pairs_mut()
                    .append_pair("q", query)
                    .append_pair("format", "json");
                client.get(url)
            }
            SearchKind::Brave => {
                let mut url = self.endpoint()?;
                url.query_pairs_mut()
                    .append_pair("q", query)
                    .append_pair("count", &max.to_string());
                client
                    .get(url)
                    .header("Accept", "application/json")
                    .header("X-Subscription-Token", key)
            }
            SearchKind::Tavily => client
                .post(self.endpoint()?)
                .bearer_auth(key)
                .json(&json!({"query": query, "max_results": max})),
        };
        let failed =
            |why: String| WebError::Search(format!("{} at {}: {why}", self.kind_name(), self.url));
        let response = request.send().await.map_err(|e| failed(without_url(&e)))?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!("it answered HTTP {}", status.as_u16())));
        }
        let body: Value = response.json().await.map_err(|e| {
            failed(format!(
                "its answer is not the JSON troupe expects: {}",
                without_url(&e)
            ))
        })?;
        let (list, snippet) = match self.kind {
            SearchKind::Searxng => (&body["results"], "content"),
            SearchKind::Brave => (&body["web"]["results"], "description"),
            SearchKind::Tavily => (&body["results"], "content"),
        };
        let text =
            |hit: &Value, key: &str| hit[key].as_str().unwrap_or_default().trim().to_string();
        Ok(list
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|hit| Hit {
                title: text(hit, "title"),
                url: text(hit, "url"),
                snippet: crate::text::excerpt(&text(hit, snippet), 400),
            })
            .filter(|hit| !hit.url.is_empty())
            .take(max)
            .collect())
    }

    fn endpoint(&self) -> Result<reqwest::Url, WebError> {
        reqwest::Url::parse(&self.url).map_err(|e| WebError::Search(e.to_string()))
    }
}

/// A request's error without its URL, which holds the query.
fn without_url(e: &reqwest::Error) -> String {
    let mut said = e.to_string();
    if let Some(url) = e.url() {
        said = said.replace(url.as_str(), "the endpoint");
    }
    said
}
