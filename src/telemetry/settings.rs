//! Where a run's spans go: `--otlp-endpoint`, the standard
//! `OTEL_EXPORTER_OTLP_*` variables, or `otlp_endpoint` in the config
//! file, in that order; none of them, no export.

use std::time::Duration;

/// The path an OTLP/HTTP collector takes traces on.
const TRACES_PATH: &str = "/v1/traces";
/// How long one export may take, unless `OTEL_EXPORTER_OTLP_TIMEOUT`
/// says otherwise: shorter than the spec's 10 s, since a run's end waits
/// this long at most for a collector that does not answer.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq)]
pub struct ExportSettings {
    /// The full URL spans are posted to.
    pub url: String,
    /// What named it, for messages.
    pub origin: String,
    pub service_name: String,
    /// One export's limit, and the most the run's end waits for the last.
    pub timeout: Duration,
}

impl ExportSettings {
    /// The settings `flag` and the variables `env` reads give, with the
    /// config file's `config` last; `Ok(None)` when nothing asks for an
    /// export or `OTEL_SDK_DISABLED=true` turns it off.
    pub fn resolve(
        flag: Option<&str>,
        config: Option<(String, String)>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<ExportSettings>, String> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        // Each with whether the traces path is still to be added.
        let chosen = match flag {
            Some(url) => Some((url.to_string(), "--otlp-endpoint".to_string(), true)),
            None => set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .map(|url| (url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT".to_string(), false))
                .or_else(|| {
                    set("OTEL_EXPORTER_OTLP_ENDPOINT")
                        .map(|url| (url, "OTEL_EXPORTER_OTLP_ENDPOINT".to_string(), true))
                })
                .or_else(|| config.map(|(url, origin)| (url, origin, true))),
        };
        let Some((given, origin, base)) = chosen else {
            return Ok(None);
        };
        let given = given.trim();
        if !(given.starts_with("http://") || given.starts_with("https://")) {
            return Err(format!(
                "{origin} is `{given}`: an OTLP/HTTP endpoint is an http:// or https:// URL, such as http://127.0.0.1:4318"
            ));
        }
        let url = match base {
            true => traces_url(given),
            false => given.to_string(),
        };
        let timeout = match set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            None => DEFAULT_TIMEOUT,
            Some(ms) => ms
                .trim()
                .parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| {
                    format!(
                        "OTEL_EXPORTER_OTLP_TIMEOUT is `{ms}`: it is milliseconds, such as 5000"
                    )
                })?,
        };
        Ok(Some(ExportSettings {
            url,
            origin,
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "troupe".to_string()),
            timeout,
        }))
    }
}

/// A base endpoint with the traces path, as the spec builds the URL from
/// `OTEL_EXPORTER_OTLP_ENDPOINT`; one that names it already is kept.
fn traces_url(base: &str) -> String {
    let base = base.trim();
    if base.trim_end_matches('/').ends_with(TRACES_PATH) {
        return base.to_string();
    }
    format!("{}{TRACES_PATH}", base.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        flag: Option<&str>,
        config: Option<&str>,
        vars: &[(&str, &str)],
    ) -> Result<Option<ExportSettings>, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let config = config.map(|url| (url.to_string(), "otlp_endpoint in troupe.toml".into()));
        ExportSettings::resolve(flag, config, |name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn nothing_set_exports_nothing() {
        assert_eq!(resolve(None, None, &[]), Ok(None));
    }

    #[test]
    fn the_flag_wins_and_gets_the_traces_path() {
        let got = resolve(
            Some("http://127.0.0.1:4318/"),
            Some("http://file:4318"),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")],
        );
        let got = got.ok().flatten().map(|s| (s.url, s.origin));
        assert_eq!(
            got,
            Some((
                "http://127.0.0.1:4318/v1/traces".to_string(),
                "--otlp-endpoint".to_string()
            ))
        );
    }

    #[test]
    fn the_traces_variable_is_taken_as_it_is_and_before_the_base_one() {
        let got = resolve(
            None,
            None,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://traces:9/custom",
                ),
            ],
        );
        assert_eq!(
            got.ok().flatten().map(|s| s.url).as_deref(),
            Some("http://traces:9/custom")
        );
        let base = resolve(
            None,
            Some("http://file:1"),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318")],
        );
        assert_eq!(
            base.ok().flatten().map(|s| s.url).as_deref(),
            Some("http://env:4318/v1/traces")
        );
    }

    #[test]
    fn the_config_key_comes_last_and_sdk_disabled_turns_all_off() {
        let got = resolve(None, Some("http://file:4318"), &[]).ok().flatten();
        assert_eq!(
            got.map(|s| s.origin).as_deref(),
            Some("otlp_endpoint in troupe.toml")
        );
        let off = resolve(
            Some("http://127.0.0.1:4318"),
            None,
            &[("OTEL_SDK_DISABLED", "TRUE")],
        );
        assert_eq!(off, Ok(None));
    }

    #[test]
    fn a_bad_url_or_timeout_is_refused_naming_its_origin() {
        let err = resolve(
            None,
            None,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318")],
        );
        assert!(
            err.is_err_and(|e| e.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && e.contains("http://"))
        );
        let err = resolve(
            Some("http://x:1"),
            None,
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "5s")],
        );
        assert!(err.is_err_and(|e| e.contains("milliseconds")));
        let ok = resolve(
            Some("http://x:1"),
            None,
            &[("OTEL_EXPORTER_OTLP_TIMEOUT", "250")],
        );
        assert_eq!(
            ok.ok().flatten().map(|s| s.timeout),
            Some(Duration::from_millis(250))
        );
    }
}
