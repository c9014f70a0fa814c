//! Kubernetes nodes: which pod holds which GPU or MIG instance, from the kubelet's
//! PodResources API on its unix socket, as jobs `k8s:<namespace>/<pod>` (`crate::pods`).
//!
//! Allocations name devices by UUID, the only name the kubelet knows; the server resolves a
//! UUID to the GPU or MIG meter that carries it, whichever source registered the meter. A
//! time-sliced device (`<uuid>::<n>` replicas) is shared by the pods holding its replicas.
//!
//! gRPC here is one unary call over HTTP/2 (hyper); the messages are decoded by
//! `parse`. With a `kubelet` table, the kubelet's `/pods` says how each pod ended
//! (`super::kubelet`).

pub mod parse;

use super::http::error_chain;
use super::kubelet::{Kubelet, KubeletConfig};
use super::{
    saved, BoxFuture, BuildError, Collected, Source, SourceConfig, SourceContext, SourceError,
    StateError,
};
use crate::pods::{by_job_key, job_key, PodStatuses, PodUse, Pods};
use crate::records::Batch;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use parse::Device;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use wattledger_domain::job_kind::JobKind;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodResourcesConfig {
    pub name: Option<String>,
    #[serde(default = "default_socket")]
    pub socket: PathBuf,
    #[serde(default = "default_interval")]
    pub interval_s: f64,
    /// Resources that are GPUs: names starting with this (`nvidia.com/gpu`,
    /// `nvidia.com/mig-1g.10gb`, `nvidia.com/gpu.shared`).
    #[serde(default = "default_prefix")]
    pub resource_prefix: String,
    /// Namespace → tenant; an unmapped namespace is its own tenant key.
    #[serde(default)]
    pub namespace_tenants: BTreeMap<String, String>,
    /// The job kind of pods.
    #[serde(default = "default_kind")]
    pub kind: JobKind,
    /// The kubelet's `/pods`, for each pod's end state, restarts and checkpoint; without
    /// it a pod's end state is unknown.
    pub kubelet: Option<KubeletConfig>,
}

fn default_socket() -> PathBuf {
    "/var/lib/kubelet/pod-resources/kubelet.sock".into()
}
fn default_interval() -> f64 {
    10.0
}
fn default_prefix() -> String {
    "nvidia.com/".into()
}
fn default_kind() -> JobKind {
    JobKind::Inference
}

impl SourceConfig for PodResourcesConfig {
    fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| format!("podresources {}", self.socket.display()))
    }

    fn interval(&self) -> std::time::Duration {
        super::interval(self.interval_s)
    }

    fn check(&self, context: &SourceContext) -> Result<(), BuildError> {
        self.kubelet_config(context).map(drop)
    }

    fn build(&self, context: &SourceContext) -> Result<Box<dyn Source>, BuildError> {
        let kubelet = self
            .kubelet_config(context)?
            .map(Kubelet::new)
            .transpose()?;
        Ok(Box::new(PodResourcesSource::new(self.clone(), kubelet)))
    }
}

impl PodResourcesConfig {
    /// The `kubelet` table with this node's name and address in its URL.
    fn kubelet_config(&self, context: &SourceContext) -> Result<Option<KubeletConfig>, BuildError> {
        let Some(k) = &self.kubelet else {
            return Ok(None);
        };
        let url = context.url(&self.name(), "kubelet.url", &k.url)?;
        Ok(Some(KubeletConfig { url, ..k.clone() }))
    }
}

pub struct PodResourcesSource {
    config: PodResourcesConfig,
    kubelet: Option<Kubelet>,
    pods: Pods,
    warned: BTreeSet<String>,
}

impl PodResourcesSource {
    pub fn new(config: PodResourcesConfig, kubelet: Option<Kubelet>) -> Self {
        PodResourcesSource {
            config,
            kubelet,
            pods: Pods::default(),
            warned: BTreeSet::new(),
        }
    }

    /// One observation of the kubelet to jobs: pods on UUID-named GPU devices, with the
    /// kubelet's pod statuses where it was asked.
    fn records(
        &mut self,
        pods: &[parse::PodDevices],
        offered: &[Device],
        statuses: Option<&PodStatuses>,
        now: DateTime<Utc>,
    ) -> Collected {
        let prefix = &self.config.resource_prefix;
        let gpu = |d: &Device| d.resource.starts_with(prefix.as_str());
        for d in pods.iter().flat_map(|p| &p.devices).filter(|d| gpu(d)) {
            let base = parse::base_device(&d.id).0;
            if !parse::is_uuid(base) && self.warned.insert(base.to_owned()) {
                tracing::warn!(device = %d.id, resource = %d.resource,
                    "device id is not a GPU or MIG UUID (GKE-style name?): no meter can match it; not allocated");
            }
        }
        let usable = |d: &Device| gpu(d) && parse::is_uuid(parse::base_device(&d.id).0);
        let seen = parse::shares(pods, offered, usable)
            .into_iter()
            .map(|((ns, pod), devices)| {
                let tenant = self
                    .config
                    .namespace_tenants
                    .get(&ns)
                    .cloned()
                    .unwrap_or_else(|| ns.clone());
                (job_key(&ns, &pod), PodUse { tenant, devices })
            })
            .collect();
        let jobs = self.pods.observe(seen, statuses, self.config.kind, now);
        let state = serde_json::to_value(&self.pods).expect("pods serialize");
        Collected::new([Batch::Jobs(jobs)], Some(state))
    }
}

/// One unary gRPC call on the kubelet's socket; the response message.
async fn call(socket: &Path, method: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let work = async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .map_err(|e| format!("{}: {e}", socket.display()))?;
        let (mut sender, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .map_err(|e| error_chain(&e))?;
        tokio::spawn(conn);
        let req = hyper::Request::post(format!("http://localhost{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(Bytes::from(parse::frame(&[]))))
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| error_chain(&e))?;
        if resp.status() != hyper::StatusCode::OK {
            return Err(format!("HTTP {}", resp.status()));
        }
        // A failed call may answer with the status in the headers alone ("trailers-only").
        let head_status = grpc_status(resp.headers());
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| error_chain(&e))?;
        let status = body.trailers().and_then(grpc_status).or(head_status);
        match status {
            Some((0, _)) => {}
            Some((code, message)) => return Err(format!("gRPC status {code}: {message}")),
            None => return Err("no gRPC status in the answer".into()),
        }
        parse::unframe(&body.to_bytes())
            .map(<[u8]>::to_vec)
            .map_err(|e| e.to_string())
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

fn grpc_status(h: &hyper::HeaderMap) -> Option<(u32, String)> {
    let code = h.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = h
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Some((code, message))
}

impl Source for PodResourcesSource {
    fn restore(&mut self, state: serde_json::Value) -> Result<(), StateError> {
        self.pods = saved(state)?;
        Ok(())
    }

    fn collect(&mut self, now: DateTime<Utc>) -> BoxFuture<'_, Result<Collected, SourceError>> {
        Box::pin(async move {
            let socket = self.config.socket.clone();
            if !socket.exists() {
                return Err(SourceError::Unavailable(format!(
                    "{} does not exist: not a Kubernetes node, or the kubelet's pod-resources \
                     directory is not mounted into the agent",
                    socket.display()
                )));
            }
            let timeout = Duration::from_secs(5);
            let fetch = |reason: String| SourceError::Fetch {
                what: socket.display().to_string(),
                reason,
            };
            let list = call(&socket, "/v1.PodResourcesLister/List", timeout)
                .await
                .map_err(fetch)?;
            let pods = parse::parse_list(&list).map_err(|e| SourceError::Parse {
                what: "ListPodResourcesResponse".into(),
                reason: e.to_string(),
            })?;
            // The devices on offer tell how many replicas a shared GPU has; kubelets before
            // 1.23 (or with the feature gate off) do not answer, and shares then count the
            // replicas pods hold.
            let offered = match call(
                &socket,
                "/v1.PodResourcesLister/GetAllocatableResources",
                timeout,
            )
            .await
            {
                Ok(msg) => parse::parse_allocatable(&msg).unwrap_or_default(),
                Err(e) => {
                    tracing::debug!(error = %e, "GetAllocatableResources unavailable");
                    Vec::new()
                }
            };
            let statuses = match &self.kubelet {
                Some(k) => match k.pods().await {
                    Ok(p) => Some(by_job_key(p)),
                    // The devices still say which pods run; only how they ended waits.
                    Err(e) => {
                        tracing::warn!(error = %e, "kubelet pods unavailable: pods that end now are closed without their end state");
                        None
                    }
                },
                None => None,
            };
            Ok(self.records(&pods, &offered, statuses.as_ref(), now))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::parse::tests::{container, devices, list, pod};
    use super::*;
    use crate::records::Job;
    use http_body_util::Empty;
    use hyper::body::Incoming;
    use std::sync::{Arc, Mutex};

    const G0: &str = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e";
    const G1: &str = "GPU-7b1e6d4f-1111-2222-3333-444455556666";

    /// A fake kubelet: real HTTP/2 and gRPC framing on a unix socket, answering List with
    /// whatever the test put in `pods` and GetAllocatableResources with three replicas of G0
    /// and a whole G1.
    fn kubelet(socket: PathBuf, pods: Arc<Mutex<Vec<u8>>>) {
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let pods = pods.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                            let pods = pods.clone();
                            async move {
                                let path = req.uri().path().to_owned();
                                let ok = req
                                    .headers()
                                    .get("content-type")
                                    .is_some_and(|v| v == "application/grpc");
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                assert!(ok && parse::unframe(&body).unwrap().is_empty());
                                let msg = match path.as_str() {
                                    "/v1.PodResourcesLister/List" => pods.lock().unwrap().clone(),
                                    "/v1.PodResourcesLister/GetAllocatableResources" => {
                                        let ids: Vec<String> =
                                            (0..3).map(|i| format!("{G0}::{i}")).collect();
                                        let ids: Vec<&str> =
                                            ids.iter().map(String::as_str).collect();
                                        let mut m = super::parse::tests::field(
                                            1,
                                            &devices("nvidia.com/gpu", &ids),
                                        );
                                        m.extend(super::parse::tests::field(
                                            1,
                                            &devices("nvidia.com/gpu", &[G1]),
                                        ));
                                        m
                                    }
                                    _ => {
                                        let r = hyper::Response::builder()
                                            .header("content-type", "application/grpc")
                                            .header("grpc-status", "12")
                                            .header("grpc-message", "unimplemented")
                                            .body(Empty::<Bytes>::new().boxed())
                                            .unwrap();
                                        return Ok::<_, std::convert::Infallible>(r);
                                    }
                                };
                                let mut trailers = hyper::HeaderMap::new();
                                trailers.insert("grpc-status", "0".parse().unwrap());
                                let body = Full::new(Bytes::from(parse::frame(&msg)))
                                    .with_trailers(async move { Some(Ok(trailers)) })
                                    .boxed();
                                Ok(hyper::Response::builder()
                                    .header("content-type", "application/grpc")
                                    .body(body)
                                    .unwrap())
                            }
                        });
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
    }

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_790_000_000 + s, 0).unwrap()
    }

    fn jobs(c: Collected) -> Vec<Job> {
        c.batches
            .into_iter()
            .flat_map(|b| match b {
                Batch::Jobs(j) => j,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn pods_on_gpus_through_a_grpc_kubelet_become_jobs_with_shares() {
        let dir = std::env::temp_dir().join(format!("wl-podres-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let answer = Arc::new(Mutex::new(list(&[
            pod(
                "serving",
                "llama-0",
                &[container(
                    "server",
                    &[devices(
                        "nvidia.com/gpu",
                        &[&format!("{G0}::0"), &format!("{G0}::1")],
                    )],
                )],
            ),
            pod(
                "research",
                "train-0",
                &[container("c", &[devices("nvidia.com/gpu", &[G1])])],
            ),
            pod(
                "serving",
                "web",
                &[container("c", &[devices("example.com/fpga", &["fpga0"])])],
            ),
            pod(
                "gke",
                "odd",
                &[container(
                    "c",
                    &[devices("nvidia.com/gpu", &["nvidia0/gi0"])],
                )],
            ),
        ])));
        kubelet(socket.clone(), answer.clone());
        let config: PodResourcesConfig = toml::from_str(&format!(
            "socket = \"{}\"\nnamespace_tenants = {{ serving = \"acme\" }}\n",
            socket.display()
        ))
        .unwrap();
        let mut s = PodResourcesSource::new(config.clone(), None);
        let first = jobs(s.collect(at(0)).await.unwrap());
        let keys: Vec<&str> = first.iter().map(|j| j.key.as_str()).collect();
        assert_eq!(
            keys,
            ["k8s:research/train-0", "k8s:serving/llama-0"],
            "only pods on UUID-named GPUs"
        );
        let llama = &first[1];
        assert_eq!(llama.tenant, "acme");
        assert_eq!(llama.allocations[0].meter, G0);
        assert_eq!(
            llama.allocations[0].share,
            Some("0.666666".parse().unwrap()),
            "2 of 3 replicas"
        );
        assert_eq!(first[0].allocations[0].share, None, "a whole GPU");
        assert!(
            jobs(s.collect(at(10)).await.unwrap()).is_empty(),
            "nothing changed"
        );

        // The agent restarts from its spooled state; meanwhile train-0 finished.
        let state = serde_json::to_value(&s.pods).unwrap();
        let mut s = PodResourcesSource::new(config, None);
        s.restore(state).unwrap();
        *answer.lock().unwrap() = list(&[pod(
            "serving",
            "llama-0",
            &[container(
                "server",
                &[devices(
                    "nvidia.com/gpu",
                    &[&format!("{G0}::0"), &format!("{G0}::1")],
                )],
            )],
        )]);
        let after = jobs(s.collect(at(20)).await.unwrap());
        assert_eq!(after.len(), 1);
        assert_eq!(
            (after[0].key.as_str(), after[0].end_at),
            ("k8s:research/train-0", Some(at(20)))
        );
        assert_eq!(after[0].start_at, at(0), "the start survives the restart");

        // A kubelet that answers a gRPC error is a fetch error, not an empty node.
        let err = call(
            &socket,
            "/v1.PodResourcesLister/Watch",
            Duration::from_secs(2),
        )
        .await
        .unwrap_err();
        assert!(err.contains("gRPC status 12"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn no_socket_is_unavailable_once() {
        let config: PodResourcesConfig =
            toml::from_str("socket = \"/nonexistent/kubelet.sock\"").unwrap();
        let mut s = PodResourcesSource::new(config, None);
        assert!(matches!(
            s.collect(at(0)).await,
            Err(SourceError::Unavailable(_))
        ));
    }
}
