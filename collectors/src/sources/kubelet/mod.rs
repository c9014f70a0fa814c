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
    /// The kubelet's pod list: `https://{node_ip}:10250/pods` (the node's address from the
    /// agent's context), or `http://<node>:10255/pods` on the read-only port.
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

    /// Runs `openssl` in `dir`, failing the test with its stderr.
    fn openssl(dir: &std::path::Path, args: &[&str]) {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl (Debian: openssl, a dependency of ca-certificates)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A CA `{name}.ca.pem` and, signed by it, a serving certificate for 127.0.0.1 as a
    /// kubelet's (`serverTLSBootstrap`) names its node's address.
    fn kubelet_certificate(dir: &std::path::Path, name: &str) {
        let (ca, ca_key) = (format!("{name}.ca.pem"), format!("{name}.ca.key"));
        let (leaf, leaf_key, csr) = (
            format!("{name}.pem"),
            format!("{name}.key"),
            format!("{name}.csr"),
        );
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let subj = format!("/CN={name} cluster CA");
        openssl(
            dir,
            &[
                &["req", "-x509"][..],
                &ec,
                &[
                    "-keyout", &ca_key, "-out", &ca, "-days", "2", "-subj", &subj,
                ],
            ]
            .concat(),
        );
        openssl(
            dir,
            &[
                &["req"][..],
                &ec,
                &[
                    "-keyout",
                    &leaf_key,
                    "-out",
                    &csr,
                    "-subj",
                    "/CN=system:node:gpu-node-1",
                ],
            ]
            .concat(),
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &leaf,
                "-days",
                "2",
                "-extfile",
                "leaf.ext",
            ],
        );
    }

    /// The authenticated port as the manifests use it: the node's address filled into the URL,
    /// the kubelet's certificate checked against the cluster CA, the token sent as a bearer
    /// token — and nothing sent to a kubelet whose certificate another CA signed.
    #[tokio::test]
    async fn the_token_goes_only_to_a_kubelet_the_cluster_ca_vouches_for() {
        let dir = std::env::temp_dir().join(format!("wl-kubelet-tls-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        kubelet_certificate(&dir, "cluster");
        kubelet_certificate(&dir, "stranger");
        std::fs::write(dir.join("token"), "sa-token-of-the-agent\n").unwrap();
        let list = format!(
            "{{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"items\":[{}]}}",
            fixtures::kubernetes("argo-pod-failed.json")
        );
        std::fs::write(dir.join("pods.json"), list).unwrap();
        // A TLS server answering GET /pods, logging each request's Authorization header.
        let kubelet = r#"
import http.server, ssl, sys
cert, key, pods, log = sys.argv[1:5]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(log, "a") as f:
            f.write(f"{self.path} {self.headers.get('authorization')}\n")
        body = open(pods, "rb").read()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
        let log = dir.join("requests.log");
        let mut child = std::process::Command::new("python3")
            .args(["-c", kubelet])
            .args([
                dir.join("cluster.pem"),
                dir.join("cluster.key"),
                dir.join("pods.json"),
                log.clone(),
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut port = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut port,
        )
        .unwrap();
        let context = crate::sources::SourceContext {
            site: "fra1".into(),
            node: Some("gpu-node-1".into()),
            node_ip: Some("127.0.0.1".parse().unwrap()),
        };
        let ask = |ca: &str| {
            let url = context
                .url(
                    "podresources",
                    "kubelet.url",
                    &format!("https://{{node_ip}}:{}/pods", port.trim()),
                )
                .unwrap();
            Kubelet::new(KubeletConfig {
                url,
                token_file: dir.join("token"),
                ca_file: Some(dir.join(ca)),
            })
            .unwrap()
        };
        let stranger = ask("stranger.ca.pem").pods().await;
        let trusted = ask("cluster.ca.pem").pods().await;
        let _ = child.kill();
        let _ = child.wait();
        let requests = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = std::fs::remove_dir_all(&dir);

        let e = stranger.unwrap_err().to_string();
        assert!(e.contains("certificate"), "{e}");
        let pods = trusted.unwrap();
        assert_eq!(
            pods.keys().collect::<Vec<_>>(),
            [&("argocd".to_string(), "my-pod".to_string())]
        );
        // One request reached the kubelet, the trusted one, with the token.
        assert_eq!(requests, "/pods Bearer sa-token-of-the-agent\n");
    }

    #[tokio::test]
    async fn the_authenticated_port_needs_its_token_file() {
        let c = config("token_file = \"/nonexistent/token\"");
        assert_eq!(c.url, "https://127.0.0.1:10250/pods");
        let e = Kubelet::new(c).unwrap().pods().await.unwrap_err();
        assert!(e.to_string().contains("token /nonexistent/token"), "{e}");
    }
}
