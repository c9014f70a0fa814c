//! The kubelet's view of the pods on this node (`GET /pods`, a `PodList`): how each pod runs
//! or ended, which a source that sees pods on GPUs adds to the jobs it sends
//! (`crate::pods`). Configured as a `kubelet` table inside `[[podresources]]` (`[[dcgm]]`
//! and `[[amd_exporter]]` do not take one yet); without one, a pod's end state stays
//! unknown.
//!
//! The authenticated port (10250) takes the pod's service-account token as a bearer token
//! (its RBAC needs `get` on `nodes/proxy`, or `nodes/pods` where the kubelet's fine-grained
//! authorization is on); the read-only port (10255, off by default since 1.10 in most
//! distributions) takes none. The token file is read at every request, since a projected
//! token is renewed on disk.

pub mod parse;

use super::http::{get_text, http_client, Auth, ClientError};
use super::SourceError;
use parse::PodStatus;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubeletConfig {
    /// The kubelet's pod list: `https://<node>:10250/pods` (reachable as 127.0.0.1 from a
    /// pod on the host network), or `http://<node>:10255/pods` on the read-only port.
    #[serde(default = "default_url")]
    pub url: String,
    /// The bearer token sent to an `https` URL (never over plain `http`).
    #[serde(default = "default_token_file")]
    pub token_file: PathBuf,
    /// PEM CA of the kubelet's serving certificate, beside the system roots: the cluster's
    /// (`/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`) where kubelets serve
    /// certificates it signed (`serverTLSBootstrap`).
    pub ca_file: Option<PathBuf>,
}

fn default_url() -> String {
    "https://127.0.0.1:10250/pods".into()
}
fn default_token_file() -> PathBuf {
    "/var/run/secrets/kubernetes.io/serviceaccount/token".into()
}

/// A kubelet to ask for its pods.
pub struct Kubelet {
    config: KubeletConfig,
    client: reqwest::Client,
}

impl Kubelet {
    pub fn new(config: KubeletConfig) -> Result<Self, ClientError> {
        let client = http_client(config.ca_file.as_deref(), Duration::from_secs(10))?;
        Ok(Kubelet { config, client })
    }

    /// The pods the kubelet runs or ran, by namespace and name, with their status.
    pub async fn pods(&self) -> Result<BTreeMap<(String, String), PodStatus>, SourceError> {
        let url = &self.config.url;
        let token = if url.starts_with("https://") {
            let path = &self.config.token_file;
            let token = std::fs::read_to_string(path).map_err(|e| SourceError::Fetch {
                what: url.clone(),
                reason: format!("token {}: {e}", path.display()),
            })?;
            Some(token.trim().to_owned())
        } else {
            None
        };
        let auth = token.as_deref().map_or(Auth::None, Auth::Bearer);
        let text = get_text(&self.client, url, auth).await?;
        parse::parse_pod_list(&text).map_err(|e| SourceError::Parse {
            what: url.clone(),
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use wattledger_domain::badput::EndState;

    fn config(toml: &str) -> KubeletConfig {
        toml::from_str(toml).unwrap()
    }

    /// The read-only port: a `PodList` of two real pods, no token sent.
    #[tokio::test]
    async fn the_kubelets_pod_list_is_read_without_a_token_over_http() {
        let list = format!(
            "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"items\":[{},{}]}}",
            fixtures::kubernetes("argo-pod-failed.json"),
            fixtures::kubernetes("ish-pod-evicted.json")
        );
        let app = axum::Router::new().route(
            "/pods",
            axum::routing::get(move |h: axum::http::HeaderMap| {
                let list = list.clone();
                async move {
                    assert!(h.get("authorization").is_none(), "no token over http");
                    list
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/pods", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let k = Kubelet::new(config(&format!(
            "url = \"{url}\"\ntoken_file = \"/nonexistent/token\""
        )))
        .unwrap();
        let pods = k.pods().await.unwrap();
        let ends: Vec<_> = pods
            .iter()
            .map(|((ns, name), s)| (ns.as_str(), name.as_str(), s.end_state))
            .collect();
        assert_eq!(
            ends,
            [
                ("argocd", "my-pod", Some(EndState::Failed)),
                ("default", "evicted-pod", Some(EndState::Preempted))
            ]
        );
    }

    #[tokio::test]
    async fn the_authenticated_port_needs_its_token_file() {
        let c = config("token_file = \"/nonexistent/token\"");
        assert_eq!(c.url, "https://127.0.0.1:10250/pods");
        let e = Kubelet::new(c).unwrap().pods().await.unwrap_err();
        assert!(e.to_string().contains("token /nonexistent/token"), "{e}");
    }
}
