//! The process's one exporter: spans queue in the SDK's batching
//! processor (bounded; a full queue drops, never waits) and leave on its
//! own thread through the OTLP/HTTP exporter, so a run never waits for a
//! collector but at its very end, and then no longer than one export's
//! timeout. A collector that cannot be reached is said once.

use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor,
};

use super::settings::ExportSettings;
use crate::protocol::{TRACESTATE_ENV, TraceParent};

/// Spans waiting to leave; past this many the newest are dropped.
const QUEUE: usize = 4096;
/// How long a batch may wait for more spans before it leaves.
const BATCH_DELAY: Duration = Duration::from_millis(1000);
/// How long a connection to the collector may take to open: a host that
/// drops packets costs one export this long, not its whole timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// A failed export is tried once more, this much later: enough for a
/// collector's hiccup, and a collector that is not there costs a run's
/// end two refused connections and this wait, not the SDK's default three
/// retries over most of a second.
const RETRY_AFTER: Duration = Duration::from_millis(50);

pub(super) struct Exporter {
    processor: BatchSpanProcessor,
    pub(super) scope: InstrumentationScope,
    /// The trace troupe itself was started in (`TRACEPARENT`), which a
    /// run joins.
    pub(super) incoming: Option<TraceParent>,
    tracestate: Option<String>,
    settings: ExportSettings,
    failed: Arc<AtomicBool>,
}

static EXPORTER: OnceLock<Exporter> = OnceLock::new();

pub(super) fn current() -> Option<&'static Exporter> {
    EXPORTER.get()
}

/// The `TRACESTATE` troupe was started with, which its children get with
/// their `TRACEPARENT`.
pub fn incoming_tracestate() -> Option<&'static str> {
    EXPORTER.get()?.tracestate.as_deref()
}

impl Exporter {
    pub(super) fn send(&self, span: SpanData) {
        self.processor.on_end(span);
    }
}

/// Starts exporting to where `settings` say, for the rest of the process.
pub fn start(settings: ExportSettings) -> Result<(), String> {
    if EXPORTER.get().is_some() {
        return Ok(());
    }
    let client = blocking_client(settings.timeout)?;
    let otlp = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_retry_policy(
            RetryPolicy::recommended()
                .with_max_retries(1)
                .with_initial_delay(RETRY_AFTER)
                .with_max_delay(RETRY_AFTER)
                .with_max_jitter(Duration::ZERO),
        )
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.url.clone())
        .with_timeout(settings.timeout)
        .build()
        .map_err(|e| format!("cannot export traces to {}: {e}", settings.url))?;
    let failed = Arc::new(AtomicBool::new(false));
    let watched = Watched {
        inner: otlp,
        url: format!("{}, which {} names", settings.url, settings.origin),
        failed: Arc::clone(&failed),
    };
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(QUEUE)
        .with_scheduled_delay(BATCH_DELAY)
        .build();
    let mut processor = BatchSpanProcessor::new(watched, config);
    let resource = Resource::builder_empty()
        .with_service_name(settings.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    processor.set_resource(&resource);
    let scope = InstrumentationScope::builder("troupe")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let exporter = Exporter {
        processor,
        scope,
        incoming: TraceParent::from_env(),
        tracestate: std::env::var(TRACESTATE_ENV).ok().filter(|s| !s.is_empty()),
        settings,
        failed,
    };
    let _ = EXPORTER.set(exporter);
    Ok(())
}

/// Sends what is queued and stops, waiting one export's timeout at most;
/// what did not leave by then is said, and dropped. Called once, as
/// troupe ends (also after Ctrl-C and `--deadline`).
pub fn finish() {
    let Some(exporter) = EXPORTER.get() else {
        return;
    };
    let timeout = exporter.settings.timeout;
    let ended = exporter.processor.shutdown_with_timeout(timeout);
    // Said once: the exporter's thread may be saying why at this moment.
    if let Err(e) = ended
        && !exporter.failed.swap(true, Ordering::Relaxed)
    {
        crate::tell!(
            "troupe: the run's last spans did not reach {} within {} ms ({e}); they are dropped",
            exporter.settings.url,
            timeout.as_millis()
        );
    }
}

/// The HTTP client of the exporter's thread. It is built on a thread of
/// its own: reqwest's blocking client starts a runtime, which cannot be
/// done inside troupe's.
fn blocking_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT.min(timeout))
            .timeout(timeout)
            .build()
    })
    .join()
    .map_err(|_| "cannot build the HTTP client of the trace exporter".to_string())?
    .map_err(|e| format!("cannot build the HTTP client of the trace exporter: {e}"))
}

/// The OTLP exporter, which says once that the collector cannot be
/// reached: the run goes on without its spans.
#[derive(Debug)]
struct Watched {
    inner: opentelemetry_otlp::SpanExporter,
    /// The collector's URL, and where it came from.
    url: String,
    failed: Arc<AtomicBool>,
}

impl SpanExporter for Watched {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let exported = self.inner.export(batch).await;
        if let Err(e) = &exported
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            crate::tell!(
                "troupe: traces are not reaching {} ({e}); the run goes on, and spans that cannot be sent are dropped",
                self.url
            );
        }
        exported
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
