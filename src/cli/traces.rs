//! Where `troupe run`, `spawn` and `apply` export their traces, read from
//! `--otlp-endpoint`, the standard variables and the config file, and
//! the exporter started before any span is made.

use super::config::Sources;
use crate::settings::Lookup;
use crate::telemetry::ExportSettings;

/// Starts exporting when something asks for it. A setting that is wrong
/// is the user's error; an exporter that cannot be made is said, and the
/// command runs without traces.
pub fn start(flag: Option<&str>, sources: &Sources) -> Result<(), String> {
    let config = sources
        .get("TROUPE_OTLP_ENDPOINT")
        .map(|sourced| (sourced.value, sourced.origin));
    let settings = ExportSettings::resolve(flag, config, |name| std::env::var(name).ok())?;
    let Some(settings) = settings else {
        return Ok(());
    };
    if let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
        && !matches!(protocol.trim(), "" | "http/protobuf")
    {
        crate::tell!(
            "troupe: OTEL_EXPORTER_OTLP_PROTOCOL is `{protocol}`, but troupe exports OTLP over HTTP (protobuf) only; {} gets that",
            settings.url
        );
    }
    if let Err(e) = crate::telemetry::start(settings) {
        crate::tell!("troupe: {e}; going on without traces");
    }
    Ok(())
}
