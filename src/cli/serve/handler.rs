//! The MCP side of the server: the tools, resources and notices of one
//! host's session, on rmcp's `ServerHandler`, and the stdio transport.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam, ServerCapabilities, ServerConfig, SubscribeRequestParams,
    Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt};
use serde_json::Value;

use super::answers::answer;
use super::calls::{self, CallError};
use super::progress::Progress;
use super::session::Notice;
use super::session::Session;
use super::{OnDisconnect, Server, agents, notices, resources, runs, tasks};

/// How often a session looks for ended agents and runs.
const WATCH: Duration = Duration::from_millis(250);

/// One host's session: a handler per session, over the server every
/// session shares.
pub struct Handler {
    inner: Arc<Inner>,
}

struct Inner {
    server: Arc<Server>,
    session: Arc<Session>,
    /// The host, once it spoke: notices go to it.
    peer: OnceLock<Peer<RoleServer>>,
}

impl Handler {
    pub fn new(server: Arc<Server>) -> Handler {
        Handler {
            inner: Arc::new(Inner {
                server,
                session: Arc::new(Session::default()),
                peer: OnceLock::new(),
            }),
        }
    }

    /// Keeps the host's peer and starts the session's watcher, once.
    fn met(&self, peer: &Peer<RoleServer>) {
        if self.inner.peer.set(peer.clone()).is_ok() {
            tokio::spawn(watch(Arc::downgrade(&self.inner)));
        }
    }
}

impl Inner {
    /// The host left: what it started and waits for is stopped, and,
    /// with `--on-disconnect terminate`, what it started in the
    /// background too. Returns once the blocking calls' troupes exited,
    /// so that the server's own end does not ask them again.
    async fn end(&self) {
        let tied = self.session.tied();
        for troupe in &tied {
            troupe.stop();
        }
        if self.server.bounds.on_disconnect == OnDisconnect::Terminate {
            self.session
                .stop_background_runs(|run| notices::run_end(&self.server, run).is_none());
            for id in self.session.background_agents() {
                if !crate::cli::agents::look(&self.server.results, &id).ended() {
                    let _ =
                        crate::cli::agents::stop(&self.server.results, &id, agents::PATIENCE, true)
                            .await;
                }
            }
        }
        let give_up = std::time::Instant::now() + Duration::from_secs(agents::PATIENCE);
        while tied.iter().any(|troupe| !troupe.has_exited()) && std::time::Instant::now() < give_up
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Tells the host of each background agent and run of the session that
/// ended, and of each subscribed resource an end updated, until the
/// session is gone.
async fn watch(inner: Weak<Inner>) {
    loop {
        tokio::time::sleep(WATCH).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let Some(peer) = inner.peer.get().cloned() else {
            continue;
        };
        if peer.is_transport_closed() {
            return;
        }
        announce(&peer, &notices::gather(&inner.server, &inner.session)).await;
        for uri in inner
            .session
            .updated_subscriptions(|uri| ended(&inner.server, uri))
        {
            let _ = peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri))
                .await;
        }
    }
}

/// Whether the agent or run whose resource `uri` is has ended: its
/// files change no more.
fn ended(server: &Server, uri: &str) -> bool {
    match resources::owner_of(uri) {
        Some(resources::Owner::Agent(id)) => crate::cli::agents::look(&server.results, id).ended(),
        Some(resources::Owner::Run(run_id)) => notices::run_end(server, run_id).is_some(),
        None => false,
    }
}

/// Sends each notice as a `notifications/message`, the seed's text as
/// its data.
async fn announce(peer: &Peer<RoleServer>, fresh: &[Notice]) {
    for notice in fresh {
        #[allow(deprecated)]
        let message = rmcp::model::LoggingMessageNotificationParam::new(
            rmcp::model::LoggingLevel::Info,
            Value::String(notice.text.clone()),
        )
        .with_logger("troupe");
        #[allow(deprecated)]
        let _ = peer.notify_logging_message(message).await;
    }
}

/// Serves one session on stdin and stdout until the host closes them, or
/// troupe is asked to stop.
pub async fn serve_stdio(server: Arc<Server>) -> anyhow::Result<ExitCode> {
    let handler = Handler::new(server);
    let inner = handler.inner.clone();
    let running = match handler.serve(rmcp::transport::stdio()).await {
        Ok(running) => running,
        Err(e) => {
            crate::tell!("troupe: the MCP host left before the session began: {e}");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let stop = crate::supervisor::interrupt::Interrupts::new();
    let signal = crate::signal::StopSignal::default();
    stop.watch(signal.clone())
        .map_err(|e| anyhow::anyhow!("cannot watch for signals: {e}"))?;
    let cancel = running.cancellation_token();
    tokio::select! {
        _ = running.waiting() => {}
        _ = signal.stopped() => cancel.cancel(),
    }
    inner.end().await;
    Ok(ExitCode::SUCCESS)
}

impl Drop for Handler {
    fn drop(&mut self) {
        // An HTTP session ended (a handler the transport made for one
        // request only never met its host, and has nothing to end).
        if self.inner.peer.get().is_some() && Arc::strong_count(&self.inner) == 1 {
            let inner = self.inner.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { inner.end().await });
            }
        }
    }
}

/// The call `name` as a task may carry it, its arguments parsed; `None`
/// for a tool that answers at once.
fn long_call(name: &str, arguments: &Option<JsonObject>) -> Option<Result<tasks::Long, CallError>> {
    let arguments = arguments.clone();
    match name {
        "create_sub_agent" => Some(calls::parse(name, arguments).map(tasks::Long::Create)),
        "run_team" => Some(calls::parse(name, arguments).map(tasks::Long::Team)),
        _ => None,
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_logging()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("troupe", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "troupe runs sub-agents and agent teams as sandboxed child processes in this workspace. \
                 create_sub_agent for one task (run_in_background for long or parallel ones, then \
                 wait_sub_agents); run_team for a goal that needs planning and review. Each agent's \
                 transcript is a resource (troupe://agents/{id}/conversation).",
            )
    }

    /// The versions with a session: notices, subscriptions and progress
    /// all outlive one request, which the stateless 2026-07-28 revision
    /// does not keep. Hosts that speak it fall back to `initialize`.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.met(&context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.met(&context.peer);
        Ok(ListToolsResult::with_all_items(calls::tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        calls::tools().into_iter().find(|tool| tool.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.met(&context.peer);
        let server = &self.inner.server;
        let session = &self.inner.session;
        let name = request.name.to_string();
        let arguments = request.arguments;
        let cancel = context.ct.clone();
        if context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
            && let Some(long) = long_call(&name, &arguments)
        {
            return Ok(match long {
                Ok(long) => {
                    let task = tasks::start(server.clone(), self.inner.session.clone(), long);
                    CallToolResponse::Task(CreateTaskResult::new(task))
                }
                Err(error) => answer(&name, Err(error), Vec::new()).into(),
            });
        }
        let outcome = match name.as_str() {
            "create_sub_agent" => {
                let progress = Progress::new(
                    context
                        .meta
                        .get_progress_token()
                        .map(|token| (context.peer.clone(), token)),
                );
                match calls::parse(&name, arguments) {
                    Ok(args) => agents::create(server, session, args, progress, cancel).await,
                    Err(e) => Err(e),
                }
            }
            "get_sub_agent_status" => {
                calls::parse(&name, arguments).map(|args| agents::status(server, args))
            }
            "wait_sub_agents" => match calls::parse(&name, arguments) {
                Ok(args) => agents::wait(server, session, args, cancel).await,
                Err(e) => Err(e),
            },
            "terminate_sub_agent" => match calls::parse(&name, arguments) {
                Ok(args) => agents::terminate(server, session, args).await,
                Err(e) => Err(e),
            },
            "run_team" => match calls::parse(&name, arguments) {
                Ok(args) => runs::run_team(server, session, args, cancel).await,
                Err(e) => Err(e),
            },
            "get_run_status" => {
                calls::parse(&name, arguments).and_then(|args| runs::get_run_status(server, args))
            }
            _ => {
                let names: Vec<String> =
                    calls::tools().iter().map(|t| t.name.to_string()).collect();
                return Err(McpError::invalid_params(
                    format!(
                        "there is no tool {name}; the tools are {}",
                        names.join(", ")
                    ),
                    None,
                ));
            }
        };
        announce(&context.peer, &notices::gather(server, session)).await;
        let pending = session.take_notices();
        Ok(answer(&name, outcome, pending).into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        self.met(&context.peer);
        let listed = resources::list(&self.inner.server.results)
            .into_iter()
            .map(|r| {
                Resource::new(r.uri, r.name)
                    .with_description(r.description)
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(listed))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let templates = resources::TEMPLATES
            .iter()
            .map(|(template, what)| {
                ResourceTemplate::new(*template, *what)
                    .with_description(*what)
                    .with_mime_type("application/json")
            })
            .collect();
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        self.met(&context.peer);
        let path = resources::locate(&self.inner.server.results, &request.uri)
            .map_err(|e| McpError::resource_not_found(e, None))?;
        let text = crate::fsutil::read_record(&path)
            .map_err(|e| McpError::resource_not_found(format!("{}: {e}", request.uri), None))?;
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri).with_mime_type("application/json"),
        ])
        .into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.met(&context.peer);
        // An agent's files may not be there yet: the subscription is to
        // what they will be.
        resources::path_of(&self.inner.server.results, &request.uri)
            .map_err(|e| McpError::resource_not_found(e, None))?;
        let ended = ended(&self.inner.server, &request.uri);
        self.inner.session.subscribe(&request.uri, ended);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.session.unsubscribe(&request.uri);
        Ok(())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, McpError> {
        Ok(GetTaskResult::new(
            self.inner.server.tasks.get_task(&request.task_id)?,
        ))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.inner.server.tasks.cancel_task(&request.task_id)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        Ok(())
    }
}
