//! The three-node control plane on loopback: a stand-in API server per node and, in front of
//! each, a real mvproxy started by [`app::start`] with the other two proxies as peers.
//!
//! The proxies are the production code on real sockets, configured through the same
//! [`ServeArgs`] validation as `mvproxy serve`; the demo only reads their discovery cache to
//! know when they have caught up with a change (each server up or down, its surface and its
//! release), and pokes it (a lookup-miss wake-up, what a request for an unknown GVR does) so
//! that catching up takes a second, not a backoff period.
//! Upgrading a node stops its stand-in and starts a new one on the new release's surface on
//! the same port, as a restarted kube-apiserver comes back on its address.
//!
//! Every proxy is told the new release as its target (`--target-discovery`, from the
//! release's documents written to a temporary directory as a user saves a staging server's),
//! so during `all-old` it already counts the requests the upgrade will break: the report's
//! "before the upgrade" section.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::DemoError;
use super::catalog::{self, Release};
use super::plan::{ClusterState, NODES, NodeState, Surfaces, node_name};
use super::workload::{NAMESPACE, SEEDED, api_version, seeded_name};
use mvproxy_core::app;
use mvproxy_core::classify::Gvr;
use mvproxy_core::config::{Listeners, ServeArgs};
use mvproxy_standin::{self as standin, StandIn};
use mvproxy_telemetry::trace::Tracer;

/// Longest wait for every proxy to see a change.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);
/// How often convergence is checked.
const CONVERGE_POLL: Duration = Duration::from_millis(25);
/// How often the proxies still behind are woken up.
const CONVERGE_NUDGE: Duration = Duration::from_millis(250);
/// Attempts at binding a restarted stand-in to its port.
const REBIND_ATTEMPTS: u32 = 100;

/// One node: its stand-in API server and its mvproxy.
pub(crate) struct Node {
    pub(crate) name: String,
    pub(crate) state: NodeState,
    standin: Option<standin::Running>,
    standin_addr: SocketAddr,
    proxy: Option<app::Running>,
    /// `http://127.0.0.1:PORT` of the proxy listener.
    pub(crate) proxy_url: String,
    /// `http://127.0.0.1:PORT` of the admin listener.
    pub(crate) admin_url: String,
}

/// The running control plane.
pub(crate) struct Stack {
    pub(crate) nodes: Vec<Node>,
    /// The new release's discovery, as `--target-discovery` reads it (removed at shutdown).
    target_dir: Option<std::path::PathBuf>,
}

/// The `target` label the proxies report: the new release's `gitVersion`.
pub(crate) fn target_label() -> &'static str {
    Release::New.git_version()
}

/// Writes the new release's `api.json`, `apis.json` and `version.json` into a fresh
/// directory under the system's temporary directory.
fn write_target() -> Result<std::path::PathBuf, DemoError> {
    let dir = std::env::temp_dir().join(format!(
        "mvproxy-demo-target-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let write = |name: &str, body: String| {
        std::fs::write(dir.join(name), body).map_err(|source| DemoError::Write {
            path: dir.join(name).display().to_string(),
            source,
        })
    };
    std::fs::create_dir_all(&dir).map_err(|source| DemoError::Write {
        path: dir.display().to_string(),
        source,
    })?;
    write(
        "api.json",
        serde_json::to_string(&catalog::core_list()).map_err(DemoError::Catalog)?,
    )?;
    write(
        "apis.json",
        catalog::apis_json(Release::New).map_err(DemoError::Catalog)?,
    )?;
    let (major, minor) = Release::New.version().split_once('.').unwrap_or(("1", "0"));
    write(
        "version.json",
        serde_json::json!({"major": major, "minor": minor, "gitVersion": target_label()})
            .to_string(),
    )?;
    Ok(dir)
}

impl Stack {
    /// Starts every node on `state` and waits until every proxy knows every server.
    /// `admin`: admin listeners on that address and port, `+1`, `+2`; port `None` for free
    /// ports. The proxies' request spans start from `tracer`.
    pub(crate) async fn start(
        state: &ClusterState,
        surfaces: &Surfaces,
        admin: (Ipv4Addr, Option<u16>),
        interrupt: &CancellationToken,
        tracer: &Tracer,
    ) -> Result<Stack, DemoError> {
        let mut nodes = Vec::new();
        for (i, node) in state.nodes.iter().enumerate() {
            let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0));
            let running = start_standin(&node_name(i), node.release, addr).await?;
            nodes.push(Node {
                name: node_name(i),
                state: *node,
                standin_addr: running.addr,
                standin: Some(running),
                proxy: None,
                proxy_url: String::new(),
                admin_url: String::new(),
            });
        }
        let mut stack = Stack {
            nodes,
            target_dir: None,
        };
        match write_target() {
            Ok(dir) => stack.target_dir = Some(dir),
            Err(e) => {
                stack.shutdown().await;
                return Err(e);
            }
        }
        if let Err(e) = stack.start_proxies(admin, tracer).await {
            stack.shutdown().await;
            return Err(e);
        }
        if let Err(e) = stack.converge(state, surfaces, interrupt).await {
            stack.shutdown().await;
            return Err(e);
        }
        Ok(stack)
    }

    /// Binds every proxy's listeners first, so each knows its peers' addresses, then
    /// starts the proxies on them.
    async fn start_proxies(
        &mut self,
        (admin_ip, admin_port): (Ipv4Addr, Option<u16>),
        tracer: &Tracer,
    ) -> Result<(), DemoError> {
        let loopback = |port: u16| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port));
        let mut sockets = Vec::with_capacity(NODES);
        for i in 0..NODES {
            let admin = admin_port.map_or(0, |p| p.saturating_add(i as u16));
            let bound = app::Sockets::bind(&Listeners {
                proxy: loopback(0),
                admin: SocketAddr::V4(SocketAddrV4::new(admin_ip, admin)),
            })
            .await
            .map_err(DemoError::Bind)?;
            sockets.push(bound);
        }
        let addrs = sockets
            .iter()
            .map(|s| s.proxy.local_addr())
            .collect::<Result<Vec<_>, _>>()
            .map_err(DemoError::Bind)?;
        let url = |addr: SocketAddr| format!("http://{addr}");
        for (i, bound) in sockets.into_iter().enumerate() {
            let args = ServeArgs {
                local: Some(url(self.nodes[i].standin_addr)),
                server_id: Some(node_name(i)),
                peers: (0..NODES)
                    .filter(|&j| j != i)
                    .map(|j| format!("{}={}", node_name(j), url(addrs[j])))
                    .collect(),
                target_discovery: self.target_dir.clone(),
                ..ServeArgs::default()
            };
            let config = args.load()?;
            let running = app::start(&config, bound, tracer.clone())
                .await
                .map_err(|source| DemoError::Start {
                    node: node_name(i),
                    source,
                })?;
            let node = &mut self.nodes[i];
            node.proxy_url = format!("http://{}", running.listen);
            node.admin_url = format!("http://{}", running.admin);
            node.proxy = Some(running);
        }
        Ok(())
    }

    /// Brings every node to `state` (stopping or starting stand-ins), then waits until every
    /// proxy's discovery cache agrees with it. Returns the time that took.
    pub(crate) async fn apply(
        &mut self,
        state: &ClusterState,
        surfaces: &Surfaces,
        interrupt: &CancellationToken,
    ) -> Result<Duration, DemoError> {
        let started = Instant::now();
        for (i, want) in state.nodes.iter().enumerate() {
            let node = &mut self.nodes[i];
            if node.state == *want {
                continue;
            }
            if let Some(running) = node.standin.take() {
                running.shutdown().await;
            }
            if want.up {
                node.standin =
                    Some(start_standin(&node.name, want.release, node.standin_addr).await?);
            }
            node.state = *want;
        }
        self.converge(state, surfaces, interrupt).await?;
        Ok(started.elapsed())
    }

    /// Waits until every proxy sees each server up or down as `state` says, with the surface
    /// of its release (the last-known one for a server that is down).
    async fn converge(
        &self,
        state: &ClusterState,
        surfaces: &Surfaces,
        interrupt: &CancellationToken,
    ) -> Result<(), DemoError> {
        let expected: Vec<Expected> = state
            .nodes
            .iter()
            .map(|n| Expected {
                up: n.up,
                surface: surfaces_of(surfaces, n.release),
                git_version: n.release.git_version(),
            })
            .collect();
        let deadline = Instant::now() + CONVERGE_TIMEOUT;
        let mut last_nudge: Option<Instant> = None;
        loop {
            let behind = self.behind(&expected);
            let Some((proxy, server, why)) = behind.first() else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(DemoError::Converge {
                    proxy: proxy.clone(),
                    server: server.clone(),
                    why: why.clone(),
                });
            }
            if last_nudge.is_none_or(|t| t.elapsed() >= CONVERGE_NUDGE) {
                for node in &self.nodes {
                    if let Some(proxy) = &node.proxy
                        && behind.iter().any(|(p, _, _)| *p == node.name)
                    {
                        proxy.cache.on_miss();
                    }
                }
                last_nudge = Some(Instant::now());
            }
            tokio::select! {
                () = tokio::time::sleep(CONVERGE_POLL) => {}
                () = interrupt.cancelled() => return Err(DemoError::Interrupted),
            }
        }
    }

    /// `(proxy, server, why)` for every server some proxy does not see as expected.
    fn behind(&self, expected: &[Expected]) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            let Some(proxy) = &node.proxy else {
                out.push((node.name.clone(), String::new(), "not started".to_owned()));
                continue;
            };
            for server in proxy.cache.servers() {
                let Some(i) = (0..NODES).find(|&i| node_name(i) == server.name.as_str()) else {
                    continue;
                };
                let want = &expected[i];
                let seen: Option<BTreeSet<Gvr>> =
                    server.view.as_ref().map(|v| v.gvrs().cloned().collect());
                let git_version = server
                    .view
                    .as_ref()
                    .and_then(|v| v.version.as_ref())
                    .map(|v| v.git_version.as_str());
                let why = if server.up != want.up {
                    Some(format!(
                        "seen {}, expected {}",
                        word(server.up),
                        word(want.up)
                    ))
                } else if seen.as_ref() != Some(&want.surface) {
                    Some(format!(
                        "sees {} GVRs, expected {}",
                        seen.map_or(0, |s| s.len()),
                        want.surface.len()
                    ))
                } else if git_version != Some(want.git_version) {
                    Some(format!(
                        "sees release {}, expected {}",
                        git_version.unwrap_or("unknown"),
                        want.git_version
                    ))
                } else {
                    None
                };
                if let Some(why) = why {
                    out.push((node.name.clone(), server.name.to_string(), why));
                }
            }
        }
        out
    }

    /// The proxy URL of node `i`.
    pub(crate) fn proxy_url(&self, i: usize) -> &str {
        self.nodes.get(i).map_or("", |n| n.proxy_url.as_str())
    }

    /// Stops every proxy, then every stand-in; returns when all have stopped.
    pub(crate) async fn shutdown(mut self) {
        let mut tasks = tokio::task::JoinSet::new();
        for node in &mut self.nodes {
            if let Some(proxy) = node.proxy.take() {
                tasks.spawn(proxy.shutdown());
            }
        }
        while tasks.join_next().await.is_some() {}
        for node in &mut self.nodes {
            if let Some(standin) = node.standin.take() {
                tasks.spawn(standin.shutdown());
            }
        }
        while tasks.join_next().await.is_some() {}
        if let Some(dir) = self.target_dir.take() {
            // Best effort: a file left in the temporary directory is no failure of the run.
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What every proxy must see of one server before traffic goes on: up or down, the surface
/// of its release (the last-known one while down), and its release from `/version`, which
/// decides the side of the skew its GVRs are counted on (`mvproxy_skew_requests_total`, which
/// the report reconciles per client, GVR and side).
struct Expected {
    up: bool,
    surface: BTreeSet<Gvr>,
    git_version: &'static str,
}

fn word(up: bool) -> &'static str {
    if up { "up" } else { "down" }
}

fn surfaces_of(surfaces: &Surfaces, release: Release) -> BTreeSet<Gvr> {
    catalog::resources()
        .into_iter()
        .filter(|r| surfaces.serves(release, &r.gvr))
        .map(|r| r.gvr)
        .collect()
}

/// Starts a stand-in of `release` on `addr` (retrying while a just-closed port is released)
/// and seeds it with the objects gets ask for.
async fn start_standin(
    name: &str,
    release: Release,
    addr: SocketAddr,
) -> Result<standin::Running, DemoError> {
    let json = catalog::apis_json(release).map_err(DemoError::Catalog)?;
    let standin = StandIn::new(name, &json)
        .map_err(DemoError::Catalog)?
        .git_version(release.git_version());
    let mut attempt = 0;
    let running = loop {
        attempt += 1;
        match standin.clone().start(addr).await {
            Ok(running) => break running,
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempt < REBIND_ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(source) => {
                return Err(DemoError::StandIn {
                    node: name.to_owned(),
                    addr,
                    source,
                });
            }
        }
    };
    seed(&running, release);
    Ok(running)
}

/// `seed-0` … for every resource the release serves that can be read: what a shared etcd
/// would already hold when a server starts.
fn seed(running: &standin::Running, release: Release) {
    for r in catalog::resources() {
        if !r.served_by(release) || !(r.allows("get") || r.allows("list")) {
            continue;
        }
        for n in 0..SEEDED {
            let mut metadata = serde_json::json!({ "name": seeded_name(n) });
            if r.namespaced {
                metadata["namespace"] = NAMESPACE.into();
            }
            let object = serde_json::json!({
                "apiVersion": api_version(&r),
                "kind": r.kind,
                "metadata": metadata,
            });
            let namespace = r.namespaced.then_some(NAMESPACE);
            running.insert(
                &r.gvr.group,
                &r.gvr.version,
                &r.gvr.resource,
                namespace,
                object,
            );
        }
    }
}
